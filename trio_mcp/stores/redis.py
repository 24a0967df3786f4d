"""The shared store: task records in Redis (or Valkey), for several server processes at once.

>>> # server = Server("tools", store=lambda: RedisTaskStore("redis://127.0.0.1:6379/0"))
>>> # server = Server("tools", store=store_from_url("rediss://user:secret@cache.internal:6380/0"))

:class:`RedisTaskStore` is a :class:`~trio_mcp.stores.base.TaskStore` and a
:class:`~trio_mcp.stores.base.SharedTaskStore`: every process on the same server and key
prefix sees the same records, talks to the others through a pub/sub channel of
:class:`~trio_mcp.stores.base.TaskEvent`, and holds leases on the tasks it runs, so that the
others can fail those tasks when it dies (:meth:`~RedisTaskStore.lapsed`). It is not a
``DurableTaskStore``: a process starting does not fail the running tasks of the others.

The client is `coredis <https://coredis.readthedocs.io>`_ (anyio-native, here on Trio; RESP3):
its connection pool (up to ``connections``, default 4, made as calls need them; calls share
them, their commands pipelined), on which each operation queues its one command itself
(``create_request``: no client-level wrappers, retry policy or telemetry span per call) — a
Lua script for most (``EVALSHA``, its text sent with ``EVAL`` to a server that lacks it), so
each is atomic on the server: nothing is ever half-written, whatever happens to the
connection — and its pub/sub for the events, on a connection of their own. No asyncio,
and ``RedisTaskStore(url)`` is a cheap constructor (no I/O), a zero-argument factory fit for
``Server(store=...)``: the first call of a Trio run starts the pool in a Trio *system task* of
that run (coredis keeps each connection's reader in a task group), which
:meth:`~RedisTaskStore.aclose` ends, from any task (and the run's end, if nobody closed it).

Where the server is (:func:`parse_redis_url`):

- ``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``: plain TCP; a USER is an ACL user (``AUTH``
  USER PASSWORD, in the ``HELLO`` of each connection), without one the ``default`` user;
- ``rediss://…``: the same over TLS, the server's certificate checked against the system's CAs
  and its host name — or, in the query, ``ssl_ca_certs=PATH`` (a CA file or directory),
  ``ssl_certfile=PATH&ssl_keyfile=PATH`` (a client certificate, for servers that ask for one),
  ``ssl_cert_reqs=required|optional|none`` and ``ssl_check_hostname=true|false``;
- ``redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]``: the primary
  of SERVICE as the Sentinels at these addresses (port 26379 by default) name it; every new
  connection asks them again, and checks the server it reaches is a primary (``ROLE``), so after
  a failover the calls reach the new primary. The credentials are the data servers'; Sentinels
  without a password. TLS with Sentinel is not supported;
- Redis Cluster (``redis+cluster://``) is refused: each operation is one script over the task's
  keys *and* the store-wide indexes (expiry, leases, each owner's list), so every key of a store
  would have to share one hash slot — one shard — and the scripts name keys they compute.

Failures. Every operation has a deadline: ``timeout`` (default 5 s) after it is called, waiting
for a free connection, connecting (TLS and ``HELLO`` included) and the server's answer all in
it (connecting alone is bounded by ``connect_timeout`` too, default 2 s). A server that cannot
be reached, or that does not answer by then — frozen, however many calls wait before this one —
makes the operation raise :class:`RedisUnavailable` (at once if the connection is refused); the
next calls connect again as needed, so they work as soon as the server is back (the supervisor
answers the failed request with -32603 and keeps serving). A connection that has not answered
for a whole ``timeout`` takes no new calls: it is closed once the calls on it have given up,
and new calls get a new connection. A server still loading its data after a restart (a
``LOADING`` answer) is not back yet, and a server that became a read-only replica (a failover
demoted it: ``READONLY``) is not the primary: :class:`RedisUnavailable` too (after the
latter, the pool's connections are closed, so the next ones ask the Sentinels again). An
operation cut short (a timeout, a lost connection, a cancelled caller) may or may not have
happened on the server — entirely or not at all; none is retried. An error the server
answers (out of memory, a wrong type under a key, a wrong password, no permission) raises
:class:`RedisReplyError`. Calls after
:meth:`~RedisTaskStore.aclose` raise :class:`~trio_mcp.stores.sqlite.StoreClosed`. The events
connection has its own rules (:meth:`~RedisTaskStore.events`): it resubscribes by itself, and
says so with a ``resync`` event.

On a :class:`trio.testing.MockClock` (the testing kit's) a call waits for the server in place,
on a blocking connection of the caller's thread (coredis's RESP3 packer and parser over a plain
or TLS socket, the same commands): an autojumping clock would otherwise jump to the next
deadline — the operation's own timeout first — whenever a call waits for the network. A call
then takes no mock time and lets no other task run, as with the memory store (the same rule as
:class:`~trio_mcp.stores.sqlite.SqliteTaskStore`); ``len(store)`` is such a call too. The
events are read by a Trio run on a thread of the module's own then, and handed to the caller's
run.

Keys, under ``prefix`` (default ``trio-mcp:``; one prefix is one shared store):

- ``task:<id>``: a hash — the record as the JSON text of
  :func:`~trio_mcp.protocol.records.record_to_json`, its version, owner, owner digest, status,
  expiry and position; its Redis TTL is the record's own time left (``expires_at -
  last_updated_at``, rewritten at every update) plus ``expiry_margin`` (default 60 s), so
  records of a process that died vanish on their own;
- ``owner:<digest>`` (the owner's epoch and counter) and ``list:<digest>`` (a sorted set of
  its task ids by position): ``page`` order and cursors, as in the other stores; they live as
  long as the owner's longest-lived record;
- ``expiry`` (task id by ``expires_at``: ``due``), ``leases`` (task id by lease end: ``lapsed``)
  and ``origins`` (task id to the process holding its lease);
- the channel ``events``: each :class:`~trio_mcp.stores.base.TaskEvent` as JSON.

Index entries of records that vanished by TTL are dropped by the next operation that meets
them. Cursors name the owner (a digest), the owner's epoch and a position in the owner's own
counter, exactly as in the SQLite store.
"""

from __future__ import annotations

import json
import logging
import math
import os
import select
import socket
import ssl
import threading
import time
import types
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import attrs
import coredis
import coredis.exceptions
import trio
from coredis import Sentinel
from coredis._packer import Packer
from coredis.commands.script import Script
from coredis.connection import BaseConnection, TCPLocation
from coredis.constants.resp import DataType
from coredis.parser import NotEnoughData, Parser
from coredis.pool import ConnectionPool, SentinelConnectionPool
from coredis.retry import NoRetryPolicy

from ..protocol.cursors import encode_cursor, split_cursor
from ..protocol.records import TaskRecord, record_from_text, record_to_text
from ..protocol.tasks import TERMINAL
from .base import InvalidCursor, TaskEvent, WorkRefused, store_key, text_digest
from .sqlite import StoreClosed

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_URL",
    "RedisAddress",
    "RedisError",
    "RedisReplyError",
    "RedisTaskStore",
    "RedisUnavailable",
    "TlsOptions",
    "parse_redis_url",
]

log = logging.getLogger("trio_mcp.actors")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "trio-mcp:"
_FOREVER_MS = 2**46
_WATCH_MS = 25 * 3600 * 1000  # a watch outlives the longest task TTL (a day), then expires
"""A Redis TTL longer than this (over two thousand years) is no TTL at all."""

T = TypeVar("T")


class RedisError(Exception):
    """The Redis task store failed."""


class RedisUnavailable(RedisError):
    """The Redis server could not be reached, or did not answer in time, or the connection broke."""


class RedisReplyError(RedisError):
    """The Redis server answered an error (its message is the exception's)."""


# ----------------------------------------------------------------------------- addresses

_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")


@attrs.frozen
class TlsOptions:
    """How a ``rediss://`` connection checks the server, and the certificate it shows (if any).

    The default is strict: the server's certificate must chain to a trusted CA (``ca_certs``,
    else the system's) and name the host connected to."""

    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    cert_reqs: str = "required"
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """A new client SSL context (ValueError if a file is missing or not a certificate/key)."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        try:
            if self.ca_certs is not None:
                if os.path.isdir(self.ca_certs):
                    context.load_verify_locations(capath=self.ca_certs)
                else:
                    context.load_verify_locations(cafile=self.ca_certs)
            if self.certfile is not None:
                context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"bad TLS option: {exc}") from None
        context.check_hostname = self.check_hostname and self.cert_reqs != "none"
        context.verify_mode = _CERT_REQS[self.cert_reqs]
        return context


@attrs.frozen(repr=False)
class RedisAddress:
    """Where the Redis server is (see :func:`parse_redis_url`): one server, over TLS or not, or
    the primary of a Sentinel ``service``."""

    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: TlsOptions | None = None
    """TLS (``rediss://``), or None."""
    sentinels: tuple[tuple[str, int], ...] = ()
    """The Sentinels to ask for the primary of ``service`` (``redis+sentinel://``), or none."""
    service: str | None = None

    def __repr__(self) -> str:
        auth = "***@" if self.password is not None else ""
        if self.sentinels:
            hosts = ",".join(f"{_host_text(host)}:{port}" for host, port in self.sentinels)
            return f"redis+sentinel://{auth}{hosts}/{self.service}/{self.db}"
        scheme = "rediss" if self.tls is not None else "redis"
        return f"{scheme}://{auth}{_host_text(self.host)}:{self.port}/{self.db}"


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _port(text: str, url: str, default: int) -> int:
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise ValueError(f"{url!r}: bad port {text!r}")
    return int(text)


def _db(text: str, url: str) -> int:
    if text and not (text.isascii() and text.isdigit()):
        raise ValueError(f"{url!r}: the database must be a number, not {text!r}")
    return int(text) if text else 0


def _bool(text: str, url: str, name: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"{url!r}: {name} must be true or false, not {text!r}")


def _tls_options(query: dict[str, list[str]], url: str) -> TlsOptions:
    values = {name: query[name][-1] for name in _TLS_OPTIONS if name in query}
    cert_reqs = values.get("ssl_cert_reqs", "required").lower()
    if cert_reqs not in _CERT_REQS:
        raise ValueError(f"{url!r}: ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
    if ("ssl_keyfile" in values) and ("ssl_certfile" not in values):
        raise ValueError(f"{url!r}: ssl_keyfile needs ssl_certfile")
    check = values.get("ssl_check_hostname")
    return TlsOptions(
        ca_certs=values.get("ssl_ca_certs"),
        certfile=values.get("ssl_certfile"),
        keyfile=values.get("ssl_keyfile"),
        cert_reqs=cert_reqs,
        check_hostname=_bool(check, url, "ssl_check_hostname") if check is not None else True,
    )


def _split_host(text: str, url: str, default_port: int) -> tuple[str, int]:
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{url!r}: bad host {text!r}")
        return host, _port(rest[1:], url, default_port)
    host, _, port = text.partition(":")
    return host, _port(port, url, default_port)


def parse_redis_url(url: str) -> RedisAddress:
    """The server a store URL names (ValueError if it is not one): ``redis://``, ``rediss://``
    (TLS) or ``redis+sentinel://`` (see the module docstring). Redis Cluster URLs are refused,
    with the reason.

    >>> parse_redis_url("redis://127.0.0.1:6380/2")
    redis://127.0.0.1:6380/2
    >>> parse_redis_url("rediss://app:secret@cache.internal?ssl_ca_certs=/etc/ca.pem")
    rediss://***@cache.internal:6379/0
    >>> parse_redis_url("redis+sentinel://s1:26379,s2/tasks/1")
    redis+sentinel://s1:26379,s2:26379/tasks/1
    """
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if "cluster" in scheme:
        raise ValueError(
            f"{url!r}: Redis Cluster is not supported by the Redis task store — each operation is"
            " one script over a task's keys and the store-wide indexes (expiry, leases, owner lists),"
            " which would all have to live in one hash slot; use one primary (with Sentinel for"
            " failover: redis+sentinel://HOST:PORT/SERVICE)"
        )
    if not sep or scheme not in ("redis", "rediss", "redis+sentinel", "rediss+sentinel"):
        raise ValueError(f"not a redis://, rediss:// or redis+sentinel:// URL: {url!r}")
    if scheme == "rediss+sentinel":
        raise ValueError(f"{url!r}: TLS with Sentinel is not supported by the Redis task store")
    rest, _, fragment = rest.partition("#")
    if fragment:
        raise ValueError(f"{url!r}: a fragment is not supported")
    rest, _, query_text = rest.partition("?")
    try:
        query = urllib.parse.parse_qs(query_text, keep_blank_values=True, strict_parsing=bool(query_text))
    except ValueError:
        raise ValueError(f"{url!r}: bad query") from None
    allowed = _TLS_OPTIONS if scheme == "rediss" else ()
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        hint = " (TLS options need rediss://)" if set(unknown) & set(_TLS_OPTIONS) else ""
        raise ValueError(f"{url!r}: unknown option {', '.join(unknown)}{hint}")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    unquote = urllib.parse.unquote
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) if user else None
        password = unquote(secret) if colon else None
    parts = [part for part in path.split("/") if part]
    if scheme == "redis+sentinel":
        if not parts or len(parts) > 2:
            raise ValueError(f"{url!r}: expected redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]")
        sentinels = tuple(_split_host(item, url, 26379) for item in hosts.split(",") if item)
        if not sentinels or any(not host for host, _ in sentinels):
            raise ValueError(f"{url!r}: no Sentinel address")
        return RedisAddress(
            db=_db(parts[1] if len(parts) > 1 else "", url),
            username=username,
            password=password,
            sentinels=sentinels,
            service=unquote(parts[0]),
        )
    if len(parts) > 1:
        raise ValueError(f"{url!r}: the path must be a database number")
    host, port = _split_host(hosts, url, 6379) if hosts else ("127.0.0.1", 6379)
    return RedisAddress(
        host=host or "127.0.0.1",
        port=port,
        db=_db(parts[0] if parts else "", url),
        username=username,
        password=password,
        tls=_tls_options(query, url) if scheme == "rediss" else None,
    )


def _arg(value: bytes | str | int | float) -> bytes | int:
    """A script argument as coredis sends it: str as UTF-8 (lone surrogates too: ids may come
    off the wire), floats exactly (``repr``; coredis's own ``%.15g`` would round them)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return store_key(value)
    if isinstance(value, bool):
        raise TypeError("no bools in Redis commands")
    if isinstance(value, int):
        return value
    return repr(float(value)).encode()


# ----------------------------------------------------------------------------- the scripts

_TERMINAL_LUA = "{" + ", ".join(f"[{json.dumps(s.value)}] = true" for s in sorted(TERMINAL)) + "}"

_PRELUDE = """
local P = ARGV[1]
local function extend(key, ms)
  -- keep key alive at least ms milliseconds more (ms < 0: for ever)
  local left = redis.call('PTTL', key)
  if ms < 0 then
    if left >= 0 then redis.call('PERSIST', key) end
  elseif left >= 0 and left < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
"""

# ARGV: P, id, owner, owner key tag, epoch, record, version, status, expires_at, ttl ms
_CREATE_RECORD = """
local function create_record()
local id = ARGV[2]
local tkey = P .. 'task:' .. id
if redis.call('EXISTS', tkey) == 1 then return 0 end
local tag = ARGV[4]
local meta, list = P .. 'owner:' .. tag, P .. 'list:' .. tag
local ms = tonumber(ARGV[10])
local fresh = redis.call('EXISTS', meta) == 0
if fresh then
  redis.call('DEL', list)
  redis.call('HSET', meta, 'epoch', ARGV[5], 'counter', 0)
end
local position = redis.call('HINCRBY', meta, 'counter', 1)
redis.call('ZADD', list, position, id)
redis.call('HSET', tkey, 'r', ARGV[6], 'v', ARGV[7], 'o', ARGV[3], 't', tag, 'p', position,
           's', ARGV[8], 'e', ARGV[9])
redis.call('ZADD', P .. 'expiry', ARGV[9], id)
redis.call('ZREM', P .. 'leases', id)
redis.call('HDEL', P .. 'origins', id)
if ms >= 0 then
  redis.call('PEXPIRE', tkey, ms)
  if fresh then
    redis.call('PEXPIRE', meta, ms)
    redis.call('PEXPIRE', list, ms)
  end
end
extend(meta, ms)
extend(list, ms)
return 1
end
"""
_CREATE = _CREATE_RECORD + "return create_record()"

# The work queue: the stream 'work' (entries: id, owner tag), read by the consumer group
# 'workers' (a consumer per process); a task's hash keeps its work ('w'), its runs ('a'), its
# stream entry ('x') and whether that entry still waits to be claimed ('q'); 'queued' counts
# the waiting entries per owner tag and in all ('*').
_QUEUE_PRELUDE = """
local function queue_entry(id, tag)
  local eid = redis.call('XADD', P .. 'work', '*', 'id', id, 't', tag)
  redis.call('HSET', P .. 'task:' .. id, 'x', eid, 'q', '1')
  redis.call('HINCRBY', P .. 'queued', tag, 1)
  redis.call('HINCRBY', P .. 'queued', '*', 1)
end
local function drop_entry(id, eid, waiting, tag)
  -- the task's entry leaves the stream (and the counts, if it still waited)
  if eid then
    redis.call('XACK', P .. 'work', 'workers', eid)
    redis.call('XDEL', P .. 'work', eid)
  end
  if waiting == '1' then
    redis.call('HINCRBY', P .. 'queued', tag, -1)
    redis.call('HINCRBY', P .. 'queued', '*', -1)
  end
end
"""

# ARGV: P, id, owner, tag, epoch, record, version, status, expires_at, ttl ms, work, holder
# ('' to queue), until, max per owner (-1: none), max in all (-1: none)
# -> 1 created, 0 the id exists, -1 the owner's share is full, -2 the queue is full
# (a record that has ended already — its run ended before its creation was stored — gets no
# lease: nothing runs it, and no later write of its process would release it)
_CREATE_WORK = (
    _QUEUE_PRELUDE
    + _CREATE_RECORD
    + f"""
local terminal = {_TERMINAL_LUA}
local id, tag, holder = ARGV[2], ARGV[4], ARGV[12]
if holder == '' then
  local counts = redis.call('HMGET', P .. 'queued', tag, '*')
  local mine, all = tonumber(counts[1] or '0'), tonumber(counts[2] or '0')
  if tonumber(ARGV[14]) >= 0 and mine >= tonumber(ARGV[14]) then return -1 end
  if tonumber(ARGV[15]) >= 0 and all >= tonumber(ARGV[15]) then return -2 end
end
if create_record() == 0 then return 0 end
local tkey = P .. 'task:' .. id
if holder == '' then
  redis.call('HSET', tkey, 'w', ARGV[11], 'a', 0)
  queue_entry(id, tag)
else
  redis.call('HSET', tkey, 'w', ARGV[11], 'a', 1)
  if not terminal[ARGV[8]] then
    redis.call('ZADD', P .. 'leases', ARGV[13], id)
    redis.call('HSET', P .. 'origins', id, holder)
  end
end
return 1
"""
)

# ARGV: P, holder, until, count -> {record, work, ...} of the tasks claimed
_CLAIM = f"""
local terminal = {_TERMINAL_LUA}
redis.pcall('XGROUP', 'CREATE', P .. 'work', 'workers', '0', 'MKSTREAM')
local got = redis.call('XREADGROUP', 'GROUP', 'workers', ARGV[2], 'COUNT', ARGV[4],
                       'STREAMS', P .. 'work', '>')
local out = {{}}
if not got then return out end
for _, entry in ipairs(got[1][2]) do
  local eid, fields = entry[1], entry[2]
  local id, tag = fields[2], fields[4]
  local tkey = P .. 'task:' .. id
  local row = redis.call('HMGET', tkey, 'r', 's', 'w', 'x', 'q')
  if row[1] and row[4] == eid and row[5] == '1' then
    redis.call('HSET', tkey, 'q', '0')
  end
  if row[5] ~= '0' or not row[1] then  -- it waited (or its record vanished by TTL): counted
    redis.call('HINCRBY', P .. 'queued', tag, -1)
    redis.call('HINCRBY', P .. 'queued', '*', -1)
  end
  if row[1] and row[4] == eid and not terminal[row[2]] and row[3] then
    redis.call('HINCRBY', tkey, 'a', 1)
    redis.call('ZADD', P .. 'leases', ARGV[3], id)
    redis.call('HSET', P .. 'origins', id, ARGV[2])
    out[#out + 1] = row[1]
    out[#out + 1] = row[3]
  else
    redis.call('XACK', P .. 'work', 'workers', eid)
    redis.call('XDEL', P .. 'work', eid)
  end
end
return out
"""

# ARGV: P, id, now, max runs (-1: none) -> 1 queued again, 0 its lease is alive, -1 no runs
# left, -2 no work or ended
_REQUEUE = (
    _QUEUE_PRELUDE
    + f"""
local terminal = {_TERMINAL_LUA}
local id = ARGV[2]
local tkey = P .. 'task:' .. id
local row = redis.call('HMGET', tkey, 's', 'w', 'a', 'x', 'q', 't')
if not row[1] or terminal[row[1]] or not row[2] then return -2 end
if row[5] == '1' then return 0 end
local lease = redis.call('ZSCORE', P .. 'leases', id)
if not lease or tonumber(lease) > tonumber(ARGV[3]) then return 0 end
local max = tonumber(ARGV[4])
if max >= 0 and tonumber(row[3] or '0') >= max then return -1 end
redis.call('ZREM', P .. 'leases', id)
redis.call('HDEL', P .. 'origins', id)
drop_entry(id, row[4], row[5], row[6])
queue_entry(id, row[6])
return 1
"""
)

# ARGV: P, id, holder -> 1 queued again, 0 not held by holder (or ended)
_HAND_BACK = (
    _QUEUE_PRELUDE
    + f"""
local terminal = {_TERMINAL_LUA}
local id = ARGV[2]
local tkey = P .. 'task:' .. id
if redis.call('HGET', P .. 'origins', id) ~= ARGV[3] then return 0 end
local row = redis.call('HMGET', tkey, 's', 'w', 'a', 'x', 'q', 't')
if not row[1] or terminal[row[1]] or not row[2] then return 0 end
redis.call('ZREM', P .. 'leases', id)
redis.call('HDEL', P .. 'origins', id)
if tonumber(row[3] or '0') > 0 then redis.call('HINCRBY', tkey, 'a', -1) end
drop_entry(id, row[4], row[5], row[6])
queue_entry(id, row[6])
return 1
"""
)

# ARGV: P, id, owner, previous version, version, record, status, expires_at, ttl ms
_UPDATE_RECORD = """
local function update_record()
local id = ARGV[2]
local tkey = P .. 'task:' .. id
local now = redis.call('HMGET', tkey, 'v', 'o', 't')
if not now[1] or now[1] ~= ARGV[4] or now[2] ~= ARGV[3] then return 0 end
redis.call('HSET', tkey, 'r', ARGV[6], 'v', ARGV[5], 's', ARGV[7], 'e', ARGV[8])
redis.call('ZADD', P .. 'expiry', ARGV[8], id)
local ms = tonumber(ARGV[9])
if ms >= 0 then redis.call('PEXPIRE', tkey, ms) else redis.call('PERSIST', tkey) end
extend(P .. 'owner:' .. now[3], ms)
extend(P .. 'list:' .. now[3], ms)
return 1
end
"""
_UPDATE = _UPDATE_RECORD + "return update_record()"

# ARGV: P, id
_DELETE = (
    _QUEUE_PRELUDE
    + """
local id = ARGV[2]
local tkey = P .. 'task:' .. id
local now = redis.call('HMGET', tkey, 'r', 't', 'x', 'q')
if now[1] then drop_entry(id, now[3], now[4], now[2]) end
redis.call('ZREM', P .. 'expiry', id)
redis.call('ZREM', P .. 'leases', id)
redis.call('HDEL', P .. 'origins', id)
if not now[1] then return false end
redis.call('DEL', tkey)
local list = P .. 'list:' .. now[2]
redis.call('ZREM', list, id)
if redis.call('ZCARD', list) == 0 then redis.call('DEL', list, P .. 'owner:' .. now[2]) end
return now[1]
"""
)

# ARGV: P, owner key tag, owner, cursor epoch, after, limit
# -> {} (the owner has no records) | {epoch, counter, 'invalid'} | {epoch, counter, more, p1, r1, ...}
_PAGE = """
local meta, list = P .. 'owner:' .. ARGV[2], P .. 'list:' .. ARGV[2]
local m = redis.call('HMGET', meta, 'epoch', 'counter')
if not m[1] then return {} end
local after = tonumber(ARGV[5])
if ARGV[4] ~= m[1] then
  after = 0
elseif after > tonumber(m[2]) then
  return {m[1], m[2], 'invalid'}
end
local limit = tonumber(ARGV[6])
local found, got = 0, {}
local start = '(' .. after
while found <= limit do
  local batch = redis.call('ZRANGEBYSCORE', list, start, '+inf', 'WITHSCORES', 'LIMIT', 0, limit + 1 - found)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id = batch[i]
    start = '(' .. batch[i + 1]
    local row = redis.call('HMGET', P .. 'task:' .. id, 'r', 'o', 'p')
    if row[1] and row[2] == ARGV[3] and tonumber(row[3]) == tonumber(batch[i + 1]) then
      found = found + 1
      got[#got + 1] = row[3]
      got[#got + 1] = row[1]
    else
      redis.call('ZREM', list, id)
    end
  end
end
if found == 0 and redis.call('ZCARD', list) == 0 then
  redis.call('DEL', list, meta)
  return {}
end
local out = {m[1], m[2], found > limit and 'more' or 'last'}
for i = 1, math.min(found, limit) * 2 do out[#out + 1] = got[i] end
return out
"""

# ARGV: P, index name, up to, limit, terminal too ('1' or '0') -> {record, ...}, earliest first
_DUE = f"""
local terminal = {_TERMINAL_LUA}
local index = P .. ARGV[2]
local limit = tonumber(ARGV[4])
local out = {{}}
while #out < limit do
  local batch = redis.call('ZRANGEBYSCORE', index, '-inf', ARGV[3], 'LIMIT', #out, limit - #out)
  if #batch == 0 then break end
  for _, id in ipairs(batch) do
    local row = redis.call('HMGET', P .. 'task:' .. id, 'r', 's')
    if row[1] and (ARGV[5] == '1' or not terminal[row[2]]) then
      out[#out + 1] = row[1]
    else
      redis.call('ZREM', index, id)
      if ARGV[2] == 'leases' then redis.call('HDEL', P .. 'origins', id) end
    end
  end
end
return out
"""

# ARGV: P, origin, until, id... -> {n, ...}: the positions (from 1) of the ids whose record is
# terminal or gone; those get no lease (and lose any they had), the others are leased
_HOLD = f"""
local terminal = {_TERMINAL_LUA}
local over = {{}}
for i = 4, #ARGV do
  local id = ARGV[i]
  local status = redis.call('HGET', P .. 'task:' .. id, 's')
  if status and not terminal[status] then
    redis.call('ZADD', P .. 'leases', ARGV[3], id)
    redis.call('HSET', P .. 'origins', id, ARGV[2])
  else
    over[#over + 1] = i - 3
    redis.call('ZREM', P .. 'leases', id)
    redis.call('HDEL', P .. 'origins', id)
  end
end
return over
"""

# A task's lease dropped (its entry in the work queue goes too)
_RELEASE_TASK = (
    _QUEUE_PRELUDE
    + """
local function release_task(id)
  redis.call('ZREM', P .. 'leases', id)
  redis.call('HDEL', P .. 'origins', id)
  local row = redis.call('HMGET', P .. 'task:' .. id, 'x', 'q', 't')
  if row[1] then
    drop_entry(id, row[1], row[2], row[3])
    redis.call('HDEL', P .. 'task:' .. id, 'x', 'q')
  end
end
"""
)

# ARGV: P, id...
_RELEASE = (
    _RELEASE_TASK
    + """
for i = 2, #ARGV do release_task(ARGV[i]) end
return 1
"""
)

# ARGV: P, id, message -> to the process holding the task's lease (cancel, input)
_PUBLISH_HOLDER = """
local holder = redis.call('HGET', P .. 'origins', ARGV[2])
if not holder then return 0 end
return redis.call('PUBLISH', P .. 'events:' .. holder, ARGV[3])
"""

# A message to the processes watching a task (changed)
_TO_WATCHERS = """
local function to_watchers(id, message)
  local sent = 0
  for _, origin in ipairs(redis.call('SMEMBERS', P .. 'watch:' .. id)) do
    sent = sent + redis.call('PUBLISH', P .. 'events:' .. origin, message)
  end
  return sent
end
"""

# ARGV: P, id, message
_PUBLISH_WATCHERS = _TO_WATCHERS + "return to_watchers(ARGV[2], ARGV[3])"

# ARGV: P, id, owner, previous version, version, record, status, expires_at, ttl ms, message
# -> 1 stored (and announced: a terminal record's lease released, the message to the task's
# watchers), 0 not stored (nothing else done)
_UPDATE_ANNOUNCED = (
    _UPDATE_RECORD
    + _RELEASE_TASK
    + _TO_WATCHERS
    + f"""
local terminal = {_TERMINAL_LUA}
if update_record() == 0 then return 0 end
if terminal[ARGV[7]] then release_task(ARGV[2]) end
to_watchers(ARGV[2], ARGV[10])
return 1
"""
)

# ARGV: P, origin, ms, id... (watch) ; P, origin, '-1', id... (unwatch)
_WATCH = """
for i = 4, #ARGV do
  local key = P .. 'watch:' .. ARGV[i]
  if ARGV[3] == '-1' then
    redis.call('SREM', key, ARGV[2])
  else
    redis.call('SADD', key, ARGV[2])
    redis.call('PEXPIRE', key, ARGV[3])
  end
end
return 1
"""

# ARGV: P -> how many records there are (dropping index entries of vanished ones)
_COUNT = """
local index = P .. 'expiry'
local count = 0
for _, id in ipairs(redis.call('ZRANGE', index, 0, -1)) do
  if redis.call('EXISTS', P .. 'task:' .. id) == 1 then count = count + 1
  else redis.call('ZREM', index, id) end
end
return count
"""


def _script(body: str) -> Script[bytes]:
    return Script(script=(_PRELUDE + body).encode())


_SCRIPTS = types.SimpleNamespace(
    create=_script(_CREATE),
    update=_script(_UPDATE),
    update_announced=_script(_UPDATE_ANNOUNCED),
    delete=_script(_DELETE),
    page=_script(_PAGE),
    due=_script(_DUE),
    hold=_script(_HOLD),
    release=_script(_RELEASE),
    create_work=_script(_CREATE_WORK),
    claim=_script(_CLAIM),
    requeue=_script(_REQUEUE),
    hand_back=_script(_HAND_BACK),
    publish_holder=_script(_PUBLISH_HOLDER),
    publish_watchers=_script(_PUBLISH_WATCHERS),
    watch=_script(_WATCH),
    count=_script(_COUNT),
)
"""coredis script objects (their text and SHA1): each call is an ``EVALSHA`` (made again as an
``EVAL`` of the text, once, on a server that lacks the script)."""

_SCRIPT_TEXTS: dict[object, bytes] = {
    script.sha: script.script for script in vars(_SCRIPTS).values() if isinstance(script.script, bytes)
}
"""Each script's text by its SHA1 (a call runs ``EVAL`` when the server lacks it)."""


def _eval(command: Command) -> Command:
    """An ``EVALSHA`` command as the ``EVAL`` of its script's text."""
    _, sha, *rest = command
    return (b"EVAL", _SCRIPT_TEXTS[sha], *rest)


# ----------------------------------------------------------------------------- connections


class _GuardedPool(ConnectionPool[Any]):
    """coredis's bounded connection pool (calls share its connections, their commands
    pipelined), with what the store's deadlines need added:

    - no slot is ever lost: a connection attempt that fails or is cut short (the caller's
      deadline), and a leased connection that died, give their slot back (coredis 6.9 keeps
      such a slot, so a pool could end up with none, and every call would wait);
    - connecting — TCP, TLS, ``HELLO`` with ``AUTH``, ``SELECT`` — is bounded by
      ``connect_timeout`` as a whole (coredis bounds the TCP and TLS part only);
    - a connection with calls waiting on it that has received nothing for ``stall_after``
      seconds takes no new calls: new calls get a new connection, and it is closed once the
      calls on it were answered or gave up (``stall_after`` after the last was made).
    """

    stall_after: float = math.inf

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._retired: set[BaseConnection] = set()

    def _stalled(self, connection: BaseConnection) -> bool:
        stats = connection.statistics
        heard = max(stats.last_byte_received_at, stats.connected_at)
        return stats.requests_pending > 0 and time.perf_counter() - heard >= self.stall_after

    def sweep(self) -> None:
        """Close the retired connections nobody waits on any more."""
        for connection in list(self._retired):
            stats = connection.statistics
            if (
                stats.requests_pending <= 0
                or time.perf_counter() - stats.last_request_created_at >= self.stall_after
            ):
                self._retired.discard(connection)
                connection.invalidate("no answer: replaced")

    def idle_connection(self) -> Any:
        """The connection on top of the pool if it is fit for new calls, else None (the caller
        waits in :meth:`get_connection` then, which makes a new connection as needed). It stays
        in the pool: the caller queues its command on it before its next checkpoint — what a
        lease and its release around ``create_request`` amount to, without their bookkeeping
        (coredis's statistics, for its telemetry) — and calls share it meanwhile."""
        if self._retired:
            self.sweep()
        available = self._available_connections
        if available.empty():
            return None
        connection: BaseConnection | None = available.get_nowait()
        available.put_nowait(connection)  # back on top, as it was
        if connection is None or not connection.reusable or self._stalled(connection):
            return None
        return connection

    async def get_connection(self, **_: Any) -> Any:
        self.sweep()
        connection = await self._available_connections.get()
        try:
            if connection is not None and (not connection.reusable or self._stalled(connection)):
                if connection.usable and connection.statistics.requests_pending > 0:
                    self._retired.add(connection)  # closed by a sweep, once its calls are over
                else:
                    connection.invalidate()
                connection = None
            if connection is None:
                connection = await self._construct_connection()
                with trio.move_on_after(self.connect_timeout or math.inf) as connecting:
                    error = await self.task_group.start(self._keep, connection)
                if connecting.cancelled_caught:
                    raise coredis.exceptions.ConnectionError(
                        f"could not connect within {self.connect_timeout} s"
                    )
                if error is not None:
                    raise error
                self.statistics.connection_created(connection)
                self._online_connections.add(connection)
        except BaseException:
            self._available_connections.append_nowait(None)  # the slot, for a new connection
            raise
        self.statistics.connection_leased(connection)
        return connection

    def release(self, connection: BaseConnection) -> None:
        self.statistics.connection_released(connection)
        usable = connection.usable and connection not in self._retired
        self._available_connections.put_nowait(connection if usable else None)

    async def _keep(
        self, connection: BaseConnection, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """A connection's life (coredis's own, but for the retired set)."""
        try:
            await connection.run(task_status=task_status)
        except coredis.exceptions.RedisError as error:
            task_status.started(error)  # (run raises only before it started)
        finally:
            self._online_connections.discard(connection)
            self._retired.discard(connection)
            if connection in self._available_connections:
                self._available_connections.remove(connection)
                self._available_connections.append_nowait(None)


class _GuardedSentinelPool(_GuardedPool, SentinelConnectionPool):
    """The same guards on coredis's Sentinel pool (each new connection asks the Sentinels where
    the primary is, and checks its role)."""


class _Host:
    """A store's coredis client in one Trio run, its pool kept open by a system task of that run
    (coredis runs each connection's reader and writer in the pool's task group)."""

    def __init__(self, client: coredis.Redis[bytes], contexts: Sequence[Any]) -> None:
        assert isinstance(client.connection_pool, _GuardedPool)
        self.client = client
        self.pool: _GuardedPool = client.connection_pool
        self.contexts = contexts
        self.ready = trio.Event()
        self.stop = trio.Event()
        self.done = trio.Event()
        self.gone = False
        self.error: BaseException | None = None

    async def serve(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                for context in self.contexts:
                    await stack.enter_async_context(context)
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:  # a system task must not raise: it would end the run
            self.error = exc
            if not isinstance(_leaf(exc), trio.Cancelled):  # (cancelled: the run ended)
                log.warning("Redis task store: the connection pool ended (%s)", _reason(exc))
        finally:
            self.gone = True
            self.ready.set()
            self.done.set()


class _InPlace:
    """A Trio run on a daemon thread of the module's own, where the events of a store used on a
    mock clock are read (waiting for them there takes no mock time)."""

    def __init__(self) -> None:
        started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None

        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                self._token = trio.lowlevel.current_trio_token()
                self._nursery = nursery
                started.set()
                await trio.sleep_forever()

        threading.Thread(target=trio.run, args=(serve,), name="trio-mcp-redis", daemon=True).start()
        started.wait()

    def _spawn(self, function: Callable[[], Awaitable[None]]) -> None:
        assert self._token is not None and self._nursery is not None
        self._token.run_sync_soon(self._nursery.start_soon, function)

    def start(self, function: Callable[[Callable[[], None]], Awaitable[None]]) -> Callable[[], None]:
        """Run ``function(started)`` there until it calls ``started()`` (or ends); a function
        that cancels it."""
        started = threading.Event()
        scope = trio.CancelScope()

        async def run() -> None:
            try:
                with scope:
                    await function(started.set)
            except Exception as exc:
                if not scope.cancel_called:
                    log.warning("Redis task store: the events reader ended (%s)", _reason(exc))
            finally:
                started.set()

        self._spawn(run)
        started.wait()
        token = self._token
        assert token is not None
        return lambda: token.run_sync_soon(scope.cancel)


_in_place_loop: list[_InPlace] = []
_in_place_lock = threading.Lock()


def _in_place() -> _InPlace:
    with _in_place_lock:
        if not _in_place_loop:
            _in_place_loop.append(_InPlace())
        return _in_place_loop[0]


Command = tuple[bytes | str | int, ...]


class _InPlaceConnection:
    """One blocking connection, for calls made in place (on a mock clock, and ``len(store)``):
    coredis's RESP3 packer and parser over a socket of the caller's thread (TLS, ``HELLO`` with
    ``AUTH``, ``SELECT`` as coredis's connections do). Connecting is bounded by
    ``connect_timeout``, each read by ``timeout``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.packer = Packer("utf-8")
        self.parser = Parser()

    def idle_but_readable(self) -> bool:
        """Whether the idle connection has something to read: the server closed it (restarted?)
        — either way it is not fit for the next command."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    def call(self, commands: Sequence[Command]) -> list[Any]:
        """Send the commands (pipelined); their replies, errors as exception values."""
        self.sock.sendall(b"".join(self.packer.pack_commands(list(commands))))
        replies: list[Any] = []
        while len(replies) < len(commands):
            parsed = self.parser.parse(decode=False)
            if isinstance(parsed, NotEnoughData):
                data = self.sock.recv(65536)
                if not data:
                    raise coredis.exceptions.ConnectionError("the server closed the connection")
                self.parser.feed(data)
            elif parsed[0] != DataType.PUSH:
                replies.append(parsed[1])
        return replies

    def close(self) -> None:
        self.sock.close()


def _on_mock_clock() -> bool:
    return hasattr(trio.lowlevel.current_clock(), "autojump_threshold")


def _leaf(exc: BaseException) -> BaseException:
    """The first error in a (nested) exception group coredis's task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, trio.Cancelled)), exc.exceptions[0])
    return exc


def _reason(exc: BaseException) -> str:
    """What went wrong, in a few words (the cause too, when coredis wraps an OSError)."""
    exc = _leaf(exc)
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return text


def _unavailable(address: RedisAddress, what: str) -> RedisUnavailable:
    return RedisUnavailable(f"Redis task store at {address!r}: {what}")


class _QuietCancelledConnects(logging.Filter):
    """Drops coredis's "Connection attempt failed unexpectedly!" error when the attempt was
    cut short by a cancellation — a call's deadline or ``connect_timeout``, which the store
    reports itself (:class:`RedisUnavailable`): not an error of its own, and one per call
    while a server is frozen."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and issubclass(kind, trio.Cancelled))


logging.getLogger("coredis").addFilter(_QuietCancelledConnects())

_FAILURES = (coredis.exceptions.RedisError, OSError, TimeoutError, trio.TooSlowError, ExceptionGroup)
"""What a coredis call raises when it fails (mapped to :class:`RedisError`)."""


# ----------------------------------------------------------------------------- the store


class RedisTaskStore:
    """Task records in Redis, shared by every process using the same server and ``prefix``
    (see the module docstring).

    ``RedisTaskStore(url)`` does no I/O (a bad URL or TLS file raises ValueError now); the
    first call connects. ``timeout`` (seconds) is each operation's deadline, counted from the
    moment it is called: waiting for a free connection, connecting and the server's answer
    all fit in it, however many calls wait before it; past it the call raises
    :class:`RedisUnavailable`. ``connect_timeout`` bounds connecting on its own as well.
    Operations share up to ``connections`` connections (made on demand). ``expiry_margin``:
    seconds a record stays in Redis after its expiry (the supervisors delete expired records
    themselves; the TTL is for those whose process died). ``heartbeat``: seconds of silence
    after which the :meth:`events` connection is pinged; with no answer within another
    ``heartbeat`` it counts as lost.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = 2.0,
        timeout: float = 5.0,
        expiry_margin: float = 60.0,
        heartbeat: float = 15.0,
        connections: int = 4,
    ) -> None:
        if not prefix:
            raise ValueError("the key prefix must not be empty")
        if min(connect_timeout, timeout, heartbeat) <= 0 or expiry_margin < 0:
            raise ValueError("timeouts must be positive and the expiry margin not negative")
        if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
            raise ValueError("connections must be a positive int")
        self.address = parse_redis_url(url)
        self.prefix = prefix
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.expiry_margin = expiry_margin
        self.heartbeat = heartbeat
        self.connections = connections
        self._prefix = store_key(prefix)
        self._ssl = self.address.tls.context() if self.address.tls is not None else None
        self._hosts: dict[trio.lowlevel.TrioToken, _Host] = {}
        """The client of each Trio run this store was called in."""
        self._in_place: _InPlaceConnection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"RedisTaskStore({str(self.address)!r}, prefix={self.prefix!r})"

    @property
    def channel(self) -> bytes:
        """The pub/sub channel of this store's events."""
        return self._prefix + b"events"

    # -- connections ----------------------------------------------------------------------
    def _new_client(self, connections: int) -> tuple[coredis.Redis[bytes], list[Any]]:
        """A coredis client (not entered yet) and the context managers to enter for it."""
        address = self.address
        options: dict[str, Any] = {
            "db": address.db,
            "connect_timeout": self.connect_timeout,
            "max_connections": connections,
        }
        if address.password is not None:
            options["username"] = address.username
            options["password"] = address.password
        pool: _GuardedPool
        if address.sentinels:
            assert address.service is not None
            sentinel: Sentinel[bytes] = Sentinel(
                [TCPLocation(host, port) for host, port in address.sentinels],
                sentinel_kwargs={"connect_timeout": self.connect_timeout, "decode_responses": False},
                retry_policy=NoRetryPolicy(),
            )
            client = sentinel.primary_for(
                address.service, connection_pool_class=_GuardedSentinelPool, **options
            )
            assert isinstance(client.connection_pool, _GuardedPool)
            pool, contexts = client.connection_pool, [sentinel, client]
        else:
            if self._ssl is not None:
                options["ssl_context"] = self._ssl
            pool = _GuardedPool(location=TCPLocation(address.host, address.port), **options)
            client = coredis.Redis(connection_pool=pool, retry_policy=NoRetryPolicy())
            contexts = [client]
        pool.stall_after = self.timeout
        return client, contexts

    async def _client(self) -> coredis.Redis[bytes]:
        """This run's client, its pool started at the first call of the run."""
        token = trio.lowlevel.current_trio_token()
        host = self._hosts.get(token)
        if host is None or host.gone:
            host = self._hosts[token] = _Host(*self._new_client(self.connections))
            trio.lowlevel.spawn_system_task(host.serve, name=f"{self!r}: connections")
        if not host.ready.is_set():
            await host.ready.wait()
        if host.gone:
            raise _unavailable(self.address, f"no connection pool ({_reason(host.error or EOFError())})")
        return host.client

    async def aclose(self) -> None:
        """Close the connections (calls under way on them fail). Later calls raise
        :class:`StoreClosed`; closing again does nothing."""
        self._closed = True
        self._drop_in_place()
        hosts, self._hosts = self._hosts, {}
        try:
            current: trio.lowlevel.TrioToken | None = trio.lowlevel.current_trio_token()
        except RuntimeError:
            current = None
        for token, host in hosts.items():
            if token is current:
                host.stop.set()
                with trio.CancelScope(shield=True):
                    await host.done.wait()
            else:
                try:
                    token.run_sync_soon(host.stop.set)
                except trio.RunFinishedError:
                    pass

    async def __aenter__(self) -> RedisTaskStore:
        await self.ping()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        await self.aclose()

    def _current_host(self) -> _Host | None:
        """This run's client, if it has one (None outside Trio)."""
        try:
            return self._hosts.get(trio.lowlevel.current_trio_token())
        except RuntimeError:
            return None

    def _failure(self, exc: BaseException) -> Exception:
        """The store's exception for what a coredis call raised."""
        if self._closed:
            return StoreClosed(f"{self!r} is closed")
        leaf = _leaf(exc)
        if isinstance(leaf, (RedisError, StoreClosed)):
            return leaf
        if isinstance(leaf, coredis.exceptions.BusyLoadingError) or str(leaf).startswith("LOADING"):
            return _unavailable(self.address, f"the server is not ready ({leaf})")
        if isinstance(leaf, coredis.exceptions.ReadOnlyError):
            # A replica now (a failover demoted it): new connections ask the Sentinels again.
            host = self._current_host()
            if host is not None:
                host.client.connection_pool.disconnect()
            return _unavailable(self.address, f"the server is a read-only replica ({leaf})")
        if isinstance(leaf, coredis.exceptions.ResponseError):
            return RedisReplyError(str(leaf))
        return _unavailable(self.address, _reason(leaf))

    def _timed_out(self) -> Exception:
        """The store's exception for a call past its deadline (retired connections swept)."""
        if self._closed:
            return StoreClosed(f"{self!r} is closed")
        host = self._current_host()
        if host is not None:
            host.pool.sweep()
        return _unavailable(self.address, f"no answer within {self.timeout} s")

    async def _call_now(self, operation: Callable[[coredis.Redis[bytes]], Awaitable[T]]) -> T:
        """``operation(client)`` in this run, within ``timeout``."""
        with trio.move_on_after(self.timeout) as deadline:
            try:
                return await operation(await self._client())
            except _FAILURES as exc:
                if not deadline.cancel_called:  # (coredis may turn our deadline into an error)
                    raise self._failure(exc) from exc
        raise self._timed_out()

    async def _call(
        self, operation: Callable[[coredis.Redis[bytes]], Awaitable[T]], commands: Sequence[Command]
    ) -> T:
        """``operation(client)`` (any coredis call, e.g. a blocking command, which keeps its
        connection while it waits), within ``timeout``; on a mock clock ``commands`` (the same
        commands) in place instead: the reply (a list of the replies if several commands). The
        store's own operations use :meth:`_send`."""
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        if _on_mock_clock():
            replies = self._call_in_place(commands)
            return replies[0] if len(replies) == 1 else replies  # type: ignore[return-value]
        return await self._call_now(operation)

    async def _send(self, commands: Sequence[Command]) -> Any:
        """The reply of ``commands`` (a list of the replies if several: pipelined on one
        connection), within ``timeout``; on a mock clock in place.

        On a warm pool (a connection fit for new calls on top of it, one command: every store
        operation) the call queues the command on it without a checkpoint (coredis's
        ``create_request``: its writer task sends it, its reader task answers it; other calls
        pipeline theirs on it meanwhile) and waits for the answer, bounded by the request's own
        timeout: the only wait of the call, so that timeout is the call's deadline, with no
        cancel scope of the store's own. Otherwise (:meth:`_send_now`) the whole call runs in a
        cancel scope with the deadline.
        """
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        host = self._hosts.get(trio.lowlevel.current_trio_token())
        # (a run with a pool is not on a mock clock: pools are made off one only)
        if host is not None and len(commands) == 1 and host.ready.is_set() and not host.gone:
            await trio.lowlevel.checkpoint_if_cancelled()  # (no yield: a cancelled caller sends nothing)
            connection = host.pool.idle_connection()
            if connection is not None:
                started = trio.current_time()
                command = commands[0]
                try:
                    return await connection.create_request(*command, decode=False, timeout=self.timeout)
                except coredis.exceptions.NoScriptError:
                    # The server lost the script (a restart, SCRIPT FLUSH): its text, once.
                    return await self._send_now([_eval(command)], started + self.timeout)
                except TimeoutError:
                    raise self._timed_out() from None
                except _FAILURES as exc:
                    raise self._failure(exc) from exc
        if _on_mock_clock():
            replies = self._call_in_place(commands)
            return replies[0] if len(replies) == 1 else replies
        return await self._send_now(commands, trio.current_time() + self.timeout)

    async def _send_now(self, commands: Sequence[Command], deadline: float) -> Any:
        """:meth:`_send` in a cancel scope with the ``deadline``: waiting for a connection of
        this run's pool (started by the run's first call), connecting, the answers."""
        with trio.CancelScope(deadline=deadline) as scope:
            try:
                pool = (await self._client()).connection_pool
                connection = await pool.get_connection()
                try:
                    requests = [connection.create_request(*command, decode=False) for command in commands]
                finally:
                    pool.release(connection)
                replies = []
                for command, request in zip(commands, requests, strict=True):
                    try:
                        replies.append(await request)
                    except coredis.exceptions.NoScriptError:
                        # The server lost the script (a restart, SCRIPT FLUSH): its text, once.
                        connection = await pool.get_connection()
                        try:
                            again = connection.create_request(*_eval(command), decode=False)
                        finally:
                            pool.release(connection)
                        replies.append(await again)
                return replies[0] if len(replies) == 1 else replies
            except _FAILURES as exc:
                if not scope.cancel_called:  # (coredis may turn our deadline into an error)
                    raise self._failure(exc) from exc
        raise self._timed_out()

    def _drop_in_place(self) -> None:
        connection, self._in_place = self._in_place, None
        if connection is not None:
            connection.close()

    def _open_in_place(self) -> _InPlaceConnection:
        address = self.address
        host, port = address.host, address.port
        if address.sentinels:
            host, port = self._primary_in_place()
        sock = socket.create_connection((host, port), timeout=self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=host)
            connection = _InPlaceConnection(sock)
            hello: Command = (b"HELLO", 3)
            if address.password is not None:
                user = store_key(address.username or "default")
                hello = (*hello, b"AUTH", user, store_key(address.password))
            handshake = [hello]
            if address.db:
                handshake.append((b"SELECT", address.db))
            if address.sentinels:
                handshake.append((b"ROLE",))
            replies = connection.call(handshake)
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
            if address.sentinels and replies[-1][0] != b"master":
                raise coredis.exceptions.ReadOnlyError("the server the Sentinels named is not a primary")
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        return connection

    def _primary_in_place(self) -> tuple[str, int]:
        """Where the Sentinels say the primary is (the first that answers)."""
        errors = []
        for host, port in self.address.sentinels:
            try:
                with socket.create_connection((host, port), timeout=self.connect_timeout) as sock:
                    sock.settimeout(self.timeout)
                    (reply,) = _InPlaceConnection(sock).call(
                        [(b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", store_key(self.address.service or ""))]
                    )
            except OSError as exc:
                errors.append(str(exc))
                continue
            if isinstance(reply, list) and len(reply) == 2:
                return reply[0].decode(), int(reply[1])
            errors.append(f"{host}:{port} names no primary")
        raise coredis.exceptions.PrimaryNotFoundError(f"no Sentinel names a primary ({'; '.join(errors)})")

    def _call_in_place(self, commands: Sequence[Command]) -> list[Any]:
        """The commands' replies, on the blocking connection (errors raised as the store's)."""
        connection = self._in_place
        if connection is not None and connection.idle_but_readable():
            self._drop_in_place()
            connection = None
        try:
            if connection is None:
                connection = self._in_place = self._open_in_place()
            replies = connection.call(commands)
        except TimeoutError as exc:
            self._drop_in_place()
            raise _unavailable(self.address, f"no answer within {self.timeout} s ({exc})") from exc
        except (*_FAILURES, ssl.SSLError) as exc:
            self._drop_in_place()
            raise self._failure(exc) from exc
        for index, reply in enumerate(replies):
            if isinstance(reply, coredis.exceptions.NoScriptError):
                (replies[index],) = connection.call([_eval(commands[index])])
        for reply in replies:
            if isinstance(reply, BaseException):
                if isinstance(reply, coredis.exceptions.ReadOnlyError):
                    self._drop_in_place()
                raise self._failure(reply)
        return replies

    async def _run(self, script: Script[bytes], *args: bytes | str | int | float) -> Any:
        """Run one of the store's scripts (``EVALSHA``; loaded into a server without it)."""
        return await self._send([(b"EVALSHA", script.sha, 0, self._prefix, *map(_arg, args))])

    async def ping(self) -> None:
        """Connect now (if not yet) and check that the server answers."""
        await self._send([(b"PING",)])

    def _ttl_ms(self, record: TaskRecord) -> int:
        """The Redis TTL of a record just written: its own time left, plus the margin."""
        left = record.expires_at - record.last_updated_at + self.expiry_margin
        if not math.isfinite(left) or left * 1000 > _FOREVER_MS:
            return -1
        return max(1, math.ceil(left * 1000))

    # -- the TaskStore interface ----------------------------------------------------------
    def _created_args(self, record: TaskRecord) -> tuple[bytes | str | int | float, ...]:
        """The arguments of the scripts that create a record (``_CREATE_RECORD``'s ARGV)."""
        text = record_to_text(record)  # before anything: a record that is not JSON changes nothing
        return (
            store_key(record.task_id),
            store_key(record.owner),
            text_digest(record.owner, 64),
            text_digest(record.task_id, 8),
            text,
            record.version,
            record.status.value,
            record.expires_at,
            self._ttl_ms(record),
        )

    async def create(self, record: TaskRecord) -> None:
        created = await self._run(_SCRIPTS.create, *self._created_args(record))
        if not created:
            raise ValueError(f"task {record.task_id!r} exists")

    async def get(self, task_id: str) -> TaskRecord | None:
        key = self._prefix + b"task:" + store_key(task_id)
        text = await self._send([(b"HGET", key, b"r")])
        return record_from_text(text) if text is not None else None

    def _updated_args(self, record: TaskRecord) -> tuple[bytes | str | int | float, ...]:
        """The arguments of the scripts that update a record (``_UPDATE_RECORD``'s ARGV)."""
        text = record_to_text(record)  # before anything: a record that is not JSON changes nothing
        return (
            store_key(record.task_id),
            store_key(record.owner),
            record.version - 1,
            record.version,
            text,
            record.status.value,
            record.expires_at,
            self._ttl_ms(record),
        )

    async def update(self, record: TaskRecord) -> bool:
        """Replace the stored record if its version is ``record.version - 1`` and its owner is
        ``record.owner`` (a record never changes owner); says whether it did."""
        return bool(await self._run(_SCRIPTS.update, *self._updated_args(record)))

    async def update_announced(self, record: TaskRecord, origin: str) -> bool:
        """:meth:`update`, and if it stored the record, in the same script: the lease of a
        terminal record released (:meth:`release`) and ``changed`` sent to the task's watchers
        (:meth:`publish`) — see :class:`~trio_mcp.stores.base.AnnouncedUpdates`."""
        message = _event_data(TaskEvent("changed", record.task_id, origin))
        return bool(await self._run(_SCRIPTS.update_announced, *self._updated_args(record), message))

    async def delete(self, task_id: str) -> TaskRecord | None:
        text = await self._run(_SCRIPTS.delete, store_key(task_id))
        return record_from_text(text) if text is not None else None

    async def page(self, owner: str, cursor: str | None, limit: int) -> tuple[list[TaskRecord], str | None]:
        tag = text_digest(owner, 16)
        after, epoch = 0, ""
        if cursor is not None:
            try:
                kind, after = split_cursor(cursor)
            except ValueError:
                raise InvalidCursor(cursor) from None
            head = f"task.{tag}."
            if not kind.startswith(head) or after < 1:
                raise InvalidCursor(cursor)  # not one made for this owner
            epoch = kind[len(head) :]
        reply = await self._run(
            _SCRIPTS.page, text_digest(owner, 64), store_key(owner), epoch, after, max(limit, 0)
        )
        if not reply:
            return [], None  # no records (any the cursor came after are gone, none came since)
        current = f"task.{tag}.{reply[0].decode()}"
        if reply[2] == b"invalid":
            raise InvalidCursor(cursor)
        rows = reply[3:]
        records = [record_from_text(text) for text in rows[1::2]]
        more = reply[2] == b"more"
        return records, (encode_cursor(current, int(rows[-2])) if records and more else None)

    async def due(self, now: float, limit: int) -> list[TaskRecord]:
        if limit <= 0:
            return []
        texts = await self._run(_SCRIPTS.due, "expiry", now, limit, "1")
        return [record_from_text(text) for text in texts]

    # -- the SharedTaskStore interface ----------------------------------------------------
    async def publish(self, event: TaskEvent) -> None:
        """Send ``event`` to the processes that need it (see
        :class:`~trio_mcp.stores.base.TargetedEvents`): ``cancel`` and ``input`` to the task's
        holder, ``changed`` to its watchers, anything else to every process."""
        data = _event_data(event)
        if event.kind in ("cancel", "input"):
            await self._run(_SCRIPTS.publish_holder, store_key(event.task_id), data)
        elif event.kind == "changed":
            await self._run(_SCRIPTS.publish_watchers, store_key(event.task_id), data)
        else:
            channel = self.channel
            await self._send([(b"PUBLISH", channel, data)])

    async def watch(self, task_ids: Sequence[str], origin: str) -> None:
        """Send ``origin`` the ``changed`` events of these tasks (for a day at most, or until
        :meth:`unwatch`)."""
        if task_ids:
            await self._run(_SCRIPTS.watch, origin, _WATCH_MS, *(store_key(task_id) for task_id in task_ids))

    async def unwatch(self, task_ids: Sequence[str], origin: str) -> None:
        if task_ids:
            await self._run(_SCRIPTS.watch, origin, "-1", *(store_key(task_id) for task_id in task_ids))

    def events_for(self, origin: str) -> AbstractAsyncContextManager[AsyncIterator[TaskEvent]]:
        """:meth:`events` for the process ``origin``: the events sent to it, and those sent to all."""
        return self._events((self.channel, self.channel + b":" + store_key(origin)))

    def events(self) -> AbstractAsyncContextManager[AsyncIterator[TaskEvent]]:
        """The events sent to every process (``work``), from now on (see :meth:`_events`)."""
        return self._events((self.channel,))

    @asynccontextmanager
    async def _events(self, channels: tuple[bytes, ...]) -> AsyncIterator[AsyncIterator[TaskEvent]]:
        """The events on these channels, from now on, on a connection of their own.

        Entering subscribes at once if the server answers; if it does not (or later, when the
        connection breaks, or stays silent to a ping for ``heartbeat`` seconds), the iterator
        keeps trying to subscribe again, and logs the outage — events published meanwhile are
        missed (delivery is at most once). Once subscribed again after a lost subscription, it
        yields a ``resync`` event (task id and origin ``""``) before any other: the reader
        re-reads whatever it waits for. It never ends by itself; leaving the block closes the
        connection. (The subscription is read by a task of its own — a system task of the run,
        or the run of in-place calls on a mock clock — that hands the events over.)
        """
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        send, receive = trio.open_memory_channel[TaskEvent](math.inf)
        subscriber = _Subscriber(self, channels)
        with send, receive:
            if _on_mock_clock():
                token = trio.lowlevel.current_trio_token()

                def hand_over(event: TaskEvent) -> None:
                    try:
                        token.run_sync_soon(_offer, send, event)
                    except trio.RunFinishedError:
                        pass

                cancel = _in_place().start(lambda started: subscriber.run(hand_over, started))
                try:
                    yield _EventStream(receive)
                finally:
                    cancel()
                return
            scope = trio.CancelScope()
            started, finished = trio.Event(), trio.Event()

            async def read() -> None:
                try:
                    with scope:
                        await subscriber.run(lambda event: _offer(send, event), started.set)
                except BaseException as exc:  # a system task must not raise: it would end the run
                    # (what coredis raises while it is cancelled is moot)
                    if not scope.cancel_called and not isinstance(_leaf(exc), trio.Cancelled):
                        log.warning("Redis task store: the events reader ended (%s)", _reason(exc))
                finally:
                    started.set()
                    finished.set()

            trio.lowlevel.spawn_system_task(read, name=f"{self!r}: events")
            await started.wait()
            try:
                yield _EventStream(receive)
            finally:
                scope.cancel()
                with trio.CancelScope(shield=True):
                    await finished.wait()

    async def hold(self, task_ids: Sequence[str], origin: str, until: float) -> list[str]:
        """Lease these tasks to ``origin`` until ``until`` (wall-clock seconds), and return
        those of them whose record is terminal or gone (cancelled through another process,
        failed by a lease sweep, expired), in the order given: they get no lease — the
        process running them should stop them. One script: what it reports is what it saw
        when it leased the others."""
        if not task_ids:
            return []
        over = await self._run(_SCRIPTS.hold, origin, until, *(store_key(task_id) for task_id in task_ids))
        return [task_ids[position - 1] for position in over]

    async def release(self, task_ids: Sequence[str]) -> None:
        """Drop the leases of these tasks (those without one are skipped)."""
        if task_ids:
            await self._run(_SCRIPTS.release, *(store_key(task_id) for task_id in task_ids))

    async def lapsed(self, now: float, limit: int) -> list[TaskRecord]:
        """Up to ``limit`` non-terminal records whose lease ended at or before ``now``, earliest
        lease first. They keep their lease until released; a lease of a record that ended or
        vanished is dropped here."""
        if limit <= 0:
            return []
        texts = await self._run(_SCRIPTS.due, "leases", now, limit, "0")
        return [record_from_text(text) for text in texts]

    async def lease(self, task_id: str) -> tuple[str, float] | None:
        """Who holds the lease of a task and until when (None: no lease) — for diagnostics (one
        round trip: a pipeline of two reads)."""
        key = store_key(task_id)
        leases, origins = self._prefix + b"leases", self._prefix + b"origins"
        until, origin = await self._send([(b"ZSCORE", leases, key), (b"HGET", origins, key)])
        if until is None or origin is None:
            return None
        return origin.decode("utf-8", "surrogatepass"), float(until)

    # -- the WorkQueue interface ----------------------------------------------------------
    async def create_work(
        self,
        record: TaskRecord,
        work: bytes,
        holder: str | None,
        until: float,
        max_owner: int | None,
        max_total: int | None,
    ) -> bool:
        """Create ``record`` with its work, held by ``holder`` or queued (see
        :class:`~trio_mcp.stores.base.WorkQueue`); one script."""
        created = await self._run(
            _SCRIPTS.create_work,
            *self._created_args(record),
            work,
            holder or "",
            until,
            -1 if max_owner is None else max_owner,
            -1 if max_total is None else max_total,
        )
        if created == -1:
            raise WorkRefused(f"Too many queued tasks for this owner (at most {max_owner}); retry later")
        if created == -2:
            raise WorkRefused(f"Server at capacity: {max_total} tasks are queued; retry later")
        return bool(created)

    async def claim(self, holder: str, count: int, until: float) -> list[tuple[TaskRecord, bytes]]:
        """Take up to ``count`` queued tasks for ``holder``, leased until ``until``."""
        if count <= 0:
            return []
        found = await self._run(_SCRIPTS.claim, holder, until, count)
        return [(record_from_text(found[i]), bytes(found[i + 1])) for i in range(0, len(found), 2)]

    async def requeue(self, task_id: str, now: float, max_runs: int | None) -> int:
        """Queue again a task whose lease lapsed (see :class:`~trio_mcp.stores.base.WorkQueue`)."""
        return int(
            await self._run(_SCRIPTS.requeue, store_key(task_id), now, -1 if max_runs is None else max_runs)
        )

    async def hand_back(self, task_id: str, holder: str) -> bool:
        """Queue again now a task ``holder`` holds, its run not counted."""
        return bool(await self._run(_SCRIPTS.hand_back, store_key(task_id), holder))

    async def work_of(self, task_id: str) -> tuple[bytes, int] | None:
        """A task's work and how many runs it has had (None: no work, or no task)."""
        key = self._prefix + b"task:" + store_key(task_id)
        work, runs = await self._send([(b"HMGET", key, b"w", b"a")])
        return None if work is None else (bytes(work), int(runs or 0))

    async def queued(self, owner: str | None = None) -> int:
        """How many tasks wait in the queue: ``owner``'s, or all."""
        field = b"*" if owner is None else text_digest(owner, 64).encode()
        key = self._prefix + b"queued"
        count = await self._send([(b"HGET", key, field)])
        return max(0, int(count or 0))

    # -- beyond the interfaces ------------------------------------------------------------
    async def count(self) -> int:
        """How many records the store holds (O(number of records))."""
        return int(await self._run(_SCRIPTS.count))

    def __len__(self) -> int:
        """How many records the store holds — a blocking call on the caller's thread, for tests
        and diagnostics only (in a Trio task, ``await store.count()``)."""
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        (count,) = self._call_in_place([(b"EVALSHA", _SCRIPTS.count.sha, 0, self._prefix)])
        return int(count)


def _event_data(event: TaskEvent) -> bytes:
    """An event as published (JSON; :func:`_event_of` reads it back)."""
    message: dict[str, Any] = {"kind": event.kind, "taskId": event.task_id, "origin": event.origin}
    if event.responses is not None:
        message["responses"] = event.responses
    return store_key(json.dumps(message, allow_nan=False, separators=(",", ":")))


def _offer(send: trio.MemorySendChannel[TaskEvent], event: TaskEvent) -> None:
    """Hand an event to the reader (dropped if the reader is gone)."""
    try:
        send.send_nowait(event)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass


_RESYNC = TaskEvent("resync", "", "")
"""What :meth:`RedisTaskStore.events` yields after subscribing again, once a subscription was
lost: events published meanwhile were missed."""


class _EventStream:
    """The iterator :meth:`RedisTaskStore.events` yields."""

    def __init__(self, receive: trio.MemoryReceiveChannel[TaskEvent]) -> None:
        self._receive = receive

    def __aiter__(self) -> _EventStream:
        return self

    async def __anext__(self) -> TaskEvent:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None


class _Subscriber:
    """The subscription behind :meth:`RedisTaskStore.events`: coredis's pub/sub on a client
    (and connection) of its own, made again whenever it is lost."""

    RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)

    def __init__(self, store: RedisTaskStore, channels: tuple[bytes, ...]) -> None:
        self.store = store
        self.channels = channels
        self.failures = 0
        self.lost = False
        """A subscription was lost and not made again yet (a ``resync`` event is due then)."""
        self.subscribed = False
        """The current try subscribed."""

    async def run(self, deliver: Callable[[TaskEvent], None], started: Callable[[], None]) -> None:
        """Subscribe, hand every event to ``deliver``, subscribe again when the subscription is
        lost; ``started()`` after the first try, whether it subscribed or not. Never returns."""
        store = self.store
        first = True
        while True:
            self.subscribed = False
            try:
                await self._subscribed(deliver, started if first else None)
            except Exception as exc:
                if self.subscribed:
                    log.warning(
                        "Redis task store at %r: task events connection lost (%s); resubscribing",
                        store.address,
                        _reason(exc),
                    )
                    self.failures, self.lost = 1, True
                    first = False
                    continue
                if self.failures == 0:
                    log.warning(
                        "Redis task store at %r: cannot subscribe to task events (%s); retrying",
                        store.address,
                        _reason(exc),
                    )
                self.failures += 1
            if first:
                first = False
                started()
            delays = self.RETRY_DELAYS
            await trio.sleep(delays[min(self.failures, len(delays)) - 1])

    async def _subscribed(
        self,
        deliver: Callable[[TaskEvent], None],
        started: Callable[[], None] | None,
    ) -> None:
        """One subscription, until it is lost (an exception; :attr:`subscribed` says whether
        it was made)."""
        store = self.store
        client, contexts = store._new_client(1)
        with trio.CancelScope(deadline=trio.current_time() + store.connect_timeout + store.timeout) as scope:
            async with AsyncExitStack() as stack:
                for context in contexts:
                    await stack.enter_async_context(context)
                pubsub = await stack.enter_async_context(
                    client.pubsub(
                        channels=list(self.channels),
                        ignore_subscribe_messages=True,
                        retry_policy=NoRetryPolicy(),
                        subscription_timeout=store.timeout,
                        max_idle_seconds=1e9,  # (the heartbeat is ours, below)
                    )
                )
                scope.deadline = math.inf
                self.subscribed = True
                if self.failures and started is None:
                    log.warning("Redis task store at %r: subscribed to task events again", store.address)
                self.failures = 0
                if self.lost:
                    self.lost = False
                    deliver(_RESYNC)  # events were missed meanwhile: the reader re-reads
                if started is not None:
                    started()
                await self._listen(pubsub, deliver)
        raise _unavailable(
            store.address, f"could not subscribe within {store.connect_timeout + store.timeout} s"
        )

    async def _listen(self, pubsub: Any, deliver: Callable[[TaskEvent], None]) -> None:
        """Hand over events until the subscription breaks (coredis cancels this then) or stays
        silent to a ping (RedisUnavailable)."""
        heartbeat = self.store.heartbeat
        while True:
            with trio.move_on_after(heartbeat) as quiet:
                message = await pubsub.get_message()
            if quiet.cancelled_caught:
                with trio.move_on_after(heartbeat) as silent:
                    await pubsub.connection.create_request(b"PING")
                if silent.cancelled_caught:
                    raise RedisUnavailable(f"no answer to a ping within {heartbeat} s")
                continue
            event = _event_of(message)
            if event is not None:
                deliver(event)


def _event_of(message: Any) -> TaskEvent | None:
    """The event in a pub/sub message, or None (another message, or not an event)."""
    if not (isinstance(message, dict) and message.get("type") == "message"):
        return None
    try:
        data = json.loads(message["data"])
        responses = data.get("responses")
        event = TaskEvent(
            kind=str(data["kind"]),
            task_id=str(data["taskId"]),
            origin=str(data["origin"]),
            responses=dict(responses) if responses is not None else None,
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("Redis task store: ignoring a malformed task event (%s)", exc)
        return None
    return event
