"""The shared store: task records in Redis (or Valkey), for several server processes at once.

>>> # server = Server("tools", store=lambda: RedisTaskStore("redis://127.0.0.1:6379/0"))
>>> # server = Server("tools", store=store_from_url("redis://127.0.0.1:6379/0"))

:class:`RedisTaskStore` is a :class:`~trio_mcp.stores.base.TaskStore` and a
:class:`~trio_mcp.stores.base.SharedTaskStore`: every process on the same server and key
prefix sees the same records, talks to the others through a pub/sub channel of
:class:`~trio_mcp.stores.base.TaskEvent`, and holds leases on the tasks it runs, so that the
others can fail those tasks when it dies (:meth:`~RedisTaskStore.lapsed`). It is not a
``DurableTaskStore``: a process starting does not fail the running tasks of the others.

The client is this module's own: RESP2 over a few TCP connections (:func:`trio.open_tcp_stream`;
up to ``connections``, default 4, made as concurrent calls need them, one call on each at a
time) and one more for the events, each operation one Lua script (``EVALSHA``), so each is
atomic on the server — nothing is ever half-written, whatever happens to the connection. No
asyncio and no background task: the store is a plain object, so ``RedisTaskStore(url)`` is a
cheap constructor (connections are made by the calls, in whatever task makes them) — a
zero-argument factory fit for ``Server(store=...)`` — and :meth:`~RedisTaskStore.aclose`
closes them from any task.

Failures. Every operation has a deadline: ``timeout`` (default 5 s) after it is called, waiting
for a free connection and connecting included (connecting alone is bounded by
``connect_timeout`` too, default 2 s). A server that cannot be reached, or that does not answer
by then — frozen, however many calls wait before this one — makes the operation raise
:class:`RedisUnavailable` (at once if the connection is refused); the connection it used is
closed (its replies may yet come) and the next call connects again, so calls work as soon as
the server is back (the supervisor answers the failed request with -32603 and keeps serving);
a server still loading its data after a restart (a ``LOADING`` answer) is not back yet.
An operation cut short (a timeout, a lost connection, a cancelled caller) may or may not have
happened on the server — entirely or not at all. An error the server answers (out of memory, a
wrong type under a key) raises :class:`RedisReplyError`. Calls after
:meth:`~RedisTaskStore.aclose` raise :class:`~trio_mcp.stores.sqlite.StoreClosed`. The events
connection has its own rules (:meth:`~RedisTaskStore.events`): it resubscribes by itself, and
says so with a ``resync`` event.

On a :class:`trio.testing.MockClock` (the testing kit's) a call waits for the server in place,
with a blocking socket, instead of in Trio: an autojumping clock would otherwise jump to the
next deadline — the operation's own timeout first — whenever a call waits for the network. A
call then takes no mock time and lets no other task run, as with the memory store (the same
rule as :class:`~trio_mcp.stores.sqlite.SqliteTaskStore`).

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
them. One Redis server (or primary): the scripts name keys they compute, so Redis Cluster is
not supported. Cursors name the owner (a digest), the owner's epoch and a position in the
owner's own counter, exactly as in the SQLite store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import select
import socket
import types
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ..protocol.cursors import encode_cursor, split_cursor
from ..protocol.records import TaskRecord, record_from_text, record_to_text
from ..protocol.tasks import TERMINAL
from .base import InvalidCursor, TaskEvent, store_key, text_digest
from .sqlite import StoreClosed

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_URL",
    "RedisAddress",
    "RedisError",
    "RedisReplyError",
    "RedisTaskStore",
    "RedisUnavailable",
    "parse_redis_url",
]

log = logging.getLogger("trio_mcp.actors")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "trio-mcp:"
_FOREVER_MS = 2**46
"""A Redis TTL longer than this (over two thousand years) is no TTL at all."""


class RedisError(Exception):
    """The Redis task store failed."""


class RedisUnavailable(RedisError):
    """The Redis server could not be reached, or did not answer in time, or the connection broke."""


class RedisReplyError(RedisError):
    """The Redis server answered an error (its message is the exception's)."""


# ----------------------------------------------------------------------------- RESP2


def _arg(value: bytes | str | int | float) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, bool):
        raise TypeError("no bools in Redis commands")
    if isinstance(value, int):
        return str(value).encode()
    return repr(float(value)).encode()


def _encode(command: Sequence[bytes | str | int | float]) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for value in command:
        data = _arg(value)
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Incomplete(Exception):
    pass


class _Parser:
    """Replies out of the bytes received so far (RESP2): ``str`` (status), ``int``, ``bytes``,
    ``None``, ``list`` and :class:`RedisReplyError` (returned, not raised)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def pop(self) -> tuple[bool, Any]:
        """(True, the next reply) and consume it, or (False, None) if it is not all here yet."""
        try:
            value, end = self._parse(0)
        except _Incomplete:
            return False, None
        except ValueError:
            raise RedisError(f"not a RESP reply: {bytes(self._buffer[:40])!r}") from None
        del self._buffer[:end]
        return True, value

    def _line(self, at: int) -> tuple[bytes, int]:
        end = self._buffer.find(b"\r\n", at)
        if end < 0:
            raise _Incomplete
        return bytes(self._buffer[at:end]), end + 2

    def _parse(self, at: int) -> tuple[Any, int]:
        line, at = self._line(at)
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "replace"), at
        if kind == b"-":
            return RedisReplyError(rest.decode("utf-8", "replace")), at
        if kind == b":":
            return int(rest), at
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None, at
            if len(self._buffer) < at + size + 2:
                raise _Incomplete
            return bytes(self._buffer[at : at + size]), at + size + 2
        if kind == b"*":
            count = int(rest)
            if count < 0:
                return None, at
            items = []
            for _ in range(count):
                item, at = self._parse(at)
                items.append(item)
            return items, at
        raise RedisError(f"not a RESP reply: {line[:40]!r}")


# ----------------------------------------------------------------------------- addresses


@attrs.frozen(repr=False)
class RedisAddress:
    """Where the Redis server is: ``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``."""

    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        auth = "***@" if self.password is not None else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis://{auth}{host}:{self.port}/{self.db}"

    def handshake(self) -> list[tuple[str | int, ...]]:
        """The commands a new connection sends first (AUTH, SELECT)."""
        commands: list[tuple[str | int, ...]] = []
        if self.password is not None:
            if self.username:
                commands.append(("AUTH", self.username, self.password))
            else:
                commands.append(("AUTH", self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        return commands


def parse_redis_url(url: str) -> RedisAddress:
    """The server a ``redis://`` URL names (ValueError if it is not one).

    >>> parse_redis_url("redis://127.0.0.1:6380/2")
    redis://127.0.0.1:6380/2
    >>> parse_redis_url("redis://:secret@cache.internal")
    redis://***@cache.internal:6379/0
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "rediss":
        raise ValueError(f"{url!r}: TLS (rediss://) is not supported by the Redis task store")
    if parts.scheme != "redis":
        raise ValueError(f"not a redis:// URL: {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: query and fragment are not supported (options are keyword arguments)")
    try:
        port = parts.port or 6379
    except ValueError:
        raise ValueError(f"{url!r}: bad port") from None
    path = parts.path.strip("/")
    if path and not (path.isascii() and path.isdigit()):
        raise ValueError(f"{url!r}: the path must be a database number")
    unquote = urllib.parse.unquote
    return RedisAddress(
        host=parts.hostname or "127.0.0.1",
        port=port,
        db=int(path) if path else 0,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


# ----------------------------------------------------------------------------- connections


def _idle_but_readable(fileno: int) -> bool:
    """Whether an idle connection has something to read: the server closed it (or broke the
    protocol); either way it is not fit for the next command."""
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    try:
        return bool(poller.poll(0))
    except OSError:
        return True


def _not_ready(replies: Sequence[Any]) -> RedisReplyError | None:
    """The ``LOADING`` error among ``replies``, if any: the server is (re)starting and still
    reading its data — not ready, rather than refusing the command."""
    for reply in replies:
        if isinstance(reply, RedisReplyError) and str(reply).startswith("LOADING"):
            return reply
    return None


def _check_handshake(replies: Sequence[Any]) -> None:
    loading = _not_ready(replies)
    if loading is not None:
        raise RedisUnavailable(f"the server is not ready ({loading})")
    for reply in replies:
        if isinstance(reply, RedisReplyError):
            raise reply


class _AsyncConnection:
    """One connection read and written in Trio."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.parser = _Parser()

    @classmethod
    async def open(cls, address: RedisAddress) -> _AsyncConnection:
        stream = await trio.open_tcp_stream(address.host, address.port)
        connection = cls(stream)
        try:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            _check_handshake(await connection.call(address.handshake()))
        except BaseException:
            connection.close()
            raise
        return connection

    def stale(self) -> bool:
        return _idle_but_readable(self.stream.socket.fileno())

    async def send(self, commands: Sequence[Sequence[Any]]) -> None:
        if commands:
            await self.stream.send_all(b"".join(_encode(command) for command in commands))

    async def receive(self) -> Any:
        while True:
            found, value = self.parser.pop()
            if found:
                return value
            data = await self.stream.receive_some(65536)
            if not data:
                raise RedisUnavailable("the server closed the connection")
            self.parser.feed(data)

    async def call(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        await self.send(commands)
        return [await self.receive() for _ in commands]

    def close(self) -> None:
        self.stream.socket.close()


class _BlockingConnection:
    """One connection on a blocking socket (calls on a mock clock, and ``len(store)``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = _Parser()

    @classmethod
    def open(cls, address: RedisAddress, connect_timeout: float, timeout: float) -> _BlockingConnection:
        sock = socket.create_connection((address.host, address.port), timeout=connect_timeout)
        connection = cls(sock)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            _check_handshake(connection.call(address.handshake()))
            sock.settimeout(timeout)
        except BaseException:
            connection.close()
            raise
        return connection

    def stale(self) -> bool:
        return _idle_but_readable(self.sock.fileno())

    def receive(self) -> Any:
        while True:
            found, value = self.parser.pop()
            if found:
                return value
            data = self.sock.recv(65536)
            if not data:
                raise RedisUnavailable("the server closed the connection")
            self.parser.feed(data)

    def call(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        if commands:
            self.sock.sendall(b"".join(_encode(command) for command in commands))
        return [self.receive() for _ in commands]

    def close(self) -> None:
        self.sock.close()


def _on_mock_clock() -> bool:
    return hasattr(trio.lowlevel.current_clock(), "autojump_threshold")


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
_CREATE = """
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
"""

# ARGV: P, id, owner, previous version, version, record, status, expires_at, ttl ms
_UPDATE = """
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
"""

# ARGV: P, id
_DELETE = """
local id = ARGV[2]
local tkey = P .. 'task:' .. id
local now = redis.call('HMGET', tkey, 'r', 't')
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

# ARGV: P, id...
_RELEASE = """
for i = 2, #ARGV do
  redis.call('ZREM', P .. 'leases', ARGV[i])
  redis.call('HDEL', P .. 'origins', ARGV[i])
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


@attrs.frozen
class _Script:
    text: bytes
    sha: str

    @classmethod
    def of(cls, body: str) -> _Script:
        text = (_PRELUDE + body).encode()
        return cls(text, hashlib.sha1(text).hexdigest())


_SCRIPTS = types.SimpleNamespace(
    create=_Script.of(_CREATE),
    update=_Script.of(_UPDATE),
    delete=_Script.of(_DELETE),
    page=_Script.of(_PAGE),
    due=_Script.of(_DUE),
    hold=_Script.of(_HOLD),
    release=_Script.of(_RELEASE),
    count=_Script.of(_COUNT),
)


# ----------------------------------------------------------------------------- the store


def _unavailable(address: RedisAddress, what: str) -> RedisUnavailable:
    return RedisUnavailable(f"Redis task store at {address!r}: {what}")


class RedisTaskStore:
    """Task records in Redis, shared by every process using the same server and ``prefix``
    (see the module docstring).

    ``RedisTaskStore(url)`` does no I/O; the first call connects. ``timeout`` (seconds) is each
    operation's deadline, counted from the moment it is called: waiting for a free connection,
    connecting and the server's answer all fit in it, however many calls wait before it; past
    it the call raises :class:`RedisUnavailable`. ``connect_timeout`` bounds connecting on its
    own as well. Operations share up to ``connections`` connections (made on demand), so one
    slow call does not hold up the others. ``expiry_margin``: seconds a record stays in Redis
    after its expiry (the supervisors delete expired records themselves; the TTL is for those
    whose process died). ``heartbeat``: seconds of silence after which the :meth:`events`
    connection is pinged; with no answer by the next one it counts as lost.
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
        self._slots = trio.Semaphore(connections)
        """One slot per connection a call may use: a call holds one from before it takes a
        connection until it gives it back (so there are never more than ``connections``)."""
        self._idle: list[_AsyncConnection] = []
        self._open: set[_AsyncConnection] = set()
        """Every connection not closed yet: the idle ones and those in a call."""
        self._blocking: _BlockingConnection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"RedisTaskStore({str(self.address)!r}, prefix={self.prefix!r})"

    @property
    def channel(self) -> bytes:
        """The pub/sub channel of this store's events."""
        return self._prefix + b"events"

    # -- connections ----------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the connections (calls under way on them fail). Later calls raise
        :class:`StoreClosed`; closing again does nothing."""
        self._closed = True
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()
        self._drop_blocking()

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

    def _discard(self, connection: _AsyncConnection) -> None:
        connection.close()
        self._open.discard(connection)

    def _drop_blocking(self) -> None:
        if self._blocking is not None:
            self._blocking.close()
            self._blocking = None

    async def _call(self, commands: Sequence[Sequence[Any]], deadline: float | None = None) -> list[Any]:
        """Send ``commands`` (pipelined) and return their replies; :class:`RedisUnavailable` if
        the server cannot be reached or has not answered by ``deadline`` (Trio time; default
        ``timeout`` from now), whatever the call had to wait for first."""
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        if _on_mock_clock():
            return self._call_blocking(commands)
        if deadline is None:
            deadline = trio.current_time() + self.timeout
        with trio.move_on_at(deadline):
            async with self._slots:
                return await self._call_in_trio(commands)
        raise _unavailable(self.address, f"no answer within {self.timeout} s")

    async def _take(self) -> _AsyncConnection:
        """An idle connection (closing those the server closed meanwhile), or a new one."""
        while self._idle:
            idle = self._idle.pop()
            if not idle.stale():
                return idle
            self._discard(idle)  # the server closed it while idle (restarted?)
        connection: _AsyncConnection | None = None
        with trio.move_on_after(self.connect_timeout):
            connection = await _AsyncConnection.open(self.address)
        if connection is None:
            raise RedisUnavailable(f"could not connect within {self.connect_timeout} s")
        if self._closed:  # closed while this one was being made
            connection.close()
            raise StoreClosed(f"{self!r} is closed")
        self._open.add(connection)
        return connection

    async def _call_in_trio(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The call, holding a slot: on a connection of its own until it is answered. One that
        fails or is cut short (a timeout, a cancelled caller) is closed, never used again: its
        replies may yet come."""
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        connection: _AsyncConnection | None = None
        try:
            connection = await self._take()
            replies = await connection.call(commands)
        except (RedisReplyError, StoreClosed):
            if connection is not None:
                self._discard(connection)
            raise  # (a reply error raised here refused the handshake: AUTH, SELECT)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, RedisError) as exc:
            if connection is not None:
                self._discard(connection)
            if self._closed:
                raise StoreClosed(f"{self!r} is closed") from exc
            raise _unavailable(self.address, str(exc) or type(exc).__name__) from exc
        except BaseException:
            if connection is not None:
                self._discard(connection)  # cut short: the connection is in an unknown state
            raise
        if self._closed:
            connection.close()
        else:
            self._idle.append(connection)
        self._check_ready(replies)
        return replies

    def _check_ready(self, replies: Sequence[Any]) -> None:
        loading = _not_ready(replies)
        if loading is not None:
            raise _unavailable(self.address, f"the server is not ready ({loading})")

    def _call_blocking(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        connection = self._blocking
        if connection is not None and connection.stale():
            connection.close()
            connection = self._blocking = None
        try:
            if connection is None:
                connection = _BlockingConnection.open(self.address, self.connect_timeout, self.timeout)
                self._blocking = connection
            replies = connection.call(commands)
        except RedisReplyError:
            self._drop_blocking()
            raise
        except RedisUnavailable:
            self._drop_blocking()
            raise
        except TimeoutError as exc:
            self._drop_blocking()
            raise _unavailable(self.address, f"no answer within the timeout ({exc})") from exc
        except (OSError, RedisError) as exc:
            self._drop_blocking()
            raise _unavailable(self.address, str(exc) or type(exc).__name__) from exc
        self._check_ready(replies)
        return replies

    async def _run(self, script: _Script, *args: bytes | str | int | float) -> Any:
        """Run one of the store's scripts (loading it into the server if it does not have it)."""
        deadline = None if _on_mock_clock() else trio.current_time() + self.timeout
        (reply,) = await self._call([("EVALSHA", script.sha, 0, self._prefix, *args)], deadline)
        if isinstance(reply, RedisReplyError) and str(reply).startswith("NOSCRIPT"):
            (reply,) = await self._call([("EVAL", script.text, 0, self._prefix, *args)], deadline)
        if isinstance(reply, RedisReplyError):
            raise reply
        return reply

    async def ping(self) -> None:
        """Connect now (if not yet) and check that the server answers."""
        (reply,) = await self._call([("PING",)])
        if isinstance(reply, RedisReplyError):
            raise reply

    def _ttl_ms(self, record: TaskRecord) -> int:
        """The Redis TTL of a record just written: its own time left, plus the margin."""
        left = record.expires_at - record.last_updated_at + self.expiry_margin
        if not math.isfinite(left) or left * 1000 > _FOREVER_MS:
            return -1
        return max(1, math.ceil(left * 1000))

    # -- the TaskStore interface ----------------------------------------------------------
    async def create(self, record: TaskRecord) -> None:
        text = record_to_text(record)  # before anything: a record that is not JSON changes nothing
        created = await self._run(
            _SCRIPTS.create,
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
        if not created:
            raise ValueError(f"task {record.task_id!r} exists")

    async def get(self, task_id: str) -> TaskRecord | None:
        (text,) = await self._call([("HGET", self._prefix + b"task:" + store_key(task_id), "r")])
        if isinstance(text, RedisReplyError):
            raise text
        return record_from_text(text) if text is not None else None

    async def update(self, record: TaskRecord) -> bool:
        """Replace the stored record if its version is ``record.version - 1`` and its owner is
        ``record.owner`` (a record never changes owner); says whether it did."""
        text = record_to_text(record)
        stored = await self._run(
            _SCRIPTS.update,
            store_key(record.task_id),
            store_key(record.owner),
            record.version - 1,
            record.version,
            text,
            record.status.value,
            record.expires_at,
            self._ttl_ms(record),
        )
        return bool(stored)

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
        """Send ``event`` to every process subscribed through :meth:`events` (this one too)."""
        message: dict[str, Any] = {"kind": event.kind, "taskId": event.task_id, "origin": event.origin}
        if event.responses is not None:
            message["responses"] = event.responses
        text = json.dumps(message, allow_nan=False, separators=(",", ":"))
        (reply,) = await self._call([("PUBLISH", self.channel, text)])
        if isinstance(reply, RedisReplyError):
            raise reply

    @asynccontextmanager
    async def events(self) -> AsyncIterator[AsyncIterator[TaskEvent]]:
        """The events every process publishes, from now on, on a connection of their own.

        Entering subscribes at once if the server answers; if it does not (or later, when the
        connection breaks, or stays silent to a ping for ``heartbeat`` seconds), the iterator
        keeps trying to subscribe again, and logs the outage — events published meanwhile are
        missed (delivery is at most once). Once subscribed again after a lost subscription, it
        yields a ``resync`` event (task id and origin ``""``) before any other: the reader
        re-reads whatever it waits for. It never ends by itself; leaving the block closes the
        connection.
        """
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        stream = _EventStream(self)
        try:
            await stream.subscribe(first=True)
            yield stream
        finally:
            stream.close()

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
        """Who holds the lease of a task and until when (None: no lease) — for diagnostics."""
        key = store_key(task_id)
        until, origin = await self._call(
            [("ZSCORE", self._prefix + b"leases", key), ("HGET", self._prefix + b"origins", key)]
        )
        if until is None or origin is None:
            return None
        return origin.decode("utf-8", "surrogatepass"), float(until)

    # -- beyond the interfaces ------------------------------------------------------------
    async def count(self) -> int:
        """How many records the store holds (O(number of records))."""
        return int(await self._run(_SCRIPTS.count))

    def __len__(self) -> int:
        """How many records the store holds — a blocking call on the caller's thread, for tests
        and diagnostics only (in a Trio task, ``await store.count()``)."""
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        commands = [("EVAL", _SCRIPTS.count.text, 0, self._prefix)]
        reply = self._call_blocking(commands)[0]
        if isinstance(reply, RedisReplyError):
            raise reply
        return int(reply)


_SILENT = object()

_RESYNC = TaskEvent("resync", "", "")
"""What :meth:`RedisTaskStore.events` yields after subscribing again, once a subscription was
lost: events published meanwhile were missed."""


class _EventStream:
    """The iterator :meth:`RedisTaskStore.events` yields: a subscription that resubscribes."""

    RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)

    def __init__(self, store: RedisTaskStore) -> None:
        self.store = store
        self.connection: _AsyncConnection | None = None
        self.failures = 0
        self.closed = False
        self.pinged = False
        """A ping went out and nothing came back since."""
        self.lost = False
        """A subscription was lost and not made again yet (a ``resync`` event is due then)."""

    def __aiter__(self) -> _EventStream:
        return self

    def close(self) -> None:
        self.closed = True
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    async def _connect(self) -> _AsyncConnection:
        store = self.store
        address = store.address
        if _on_mock_clock():  # connect in place (see the module docstring), then read in Trio
            blocking = _BlockingConnection.open(address, store.connect_timeout, store.timeout)
            try:
                _check_handshake(blocking.call([("SUBSCRIBE", store.channel)]))
            except BaseException:
                blocking.close()
                raise
            blocking.sock.setblocking(False)
            subscribed = _AsyncConnection(trio.SocketStream(trio.socket.from_stdlib_socket(blocking.sock)))
            subscribed.parser = blocking.parser  # with any message already read behind the reply
            return subscribed
        connection: _AsyncConnection | None = None
        with trio.move_on_after(store.connect_timeout):
            connection = await _AsyncConnection.open(address)
        if connection is None:
            raise RedisUnavailable(f"could not connect within {store.connect_timeout} s")
        try:
            with trio.move_on_after(store.timeout):
                _check_handshake(await connection.call([("SUBSCRIBE", store.channel)]))
                return connection
            raise RedisUnavailable(f"no answer within {store.timeout} s")
        except BaseException:
            connection.close()
            raise

    async def subscribe(self, *, first: bool = False) -> bool:
        self.pinged = False
        try:
            self.connection = await self._connect()
        except (OSError, trio.BrokenResourceError, RedisError) as exc:
            if self.failures == 0:
                log.warning(
                    "Redis task store at %r: cannot subscribe to task events (%s); retrying",
                    self.store.address,
                    exc,
                )
            self.failures += 1
            return False
        if self.failures and not first:
            log.warning("Redis task store at %r: subscribed to task events again", self.store.address)
        self.failures = 0
        return True

    async def _receive(self, connection: _AsyncConnection) -> Any:
        """The next push, or ``_SILENT`` after a quiet ``heartbeat`` (a ping went out then);
        RedisUnavailable if the ping before went unanswered. No heartbeat on a mock clock:
        there, waiting on the network is no time at all, and the clock jumps over it."""
        if _on_mock_clock():
            return await connection.receive()
        with trio.move_on_after(self.store.heartbeat):
            message = await connection.receive()
            self.pinged = False
            return message
        if self.pinged:
            raise RedisUnavailable(f"no answer to a ping within {self.store.heartbeat} s")
        self.pinged = True
        await connection.send([("PING",)])  # answered by a push: ["pong", ""]
        return _SILENT

    async def __anext__(self) -> TaskEvent:
        while True:
            if self.closed:
                raise StopAsyncIteration
            if self.connection is None:
                if not await self.subscribe():
                    delays = self.RETRY_DELAYS
                    await trio.sleep(delays[min(self.failures, len(delays)) - 1])
                elif self.lost:
                    self.lost = False
                    return _RESYNC  # events were missed meanwhile: the reader re-reads
                continue
            try:
                message = await self._receive(self.connection)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, RedisError) as exc:
                if self.closed:
                    raise StopAsyncIteration from None
                log.warning(
                    "Redis task store at %r: task events connection lost (%s); resubscribing",
                    self.store.address,
                    exc,
                )
                self.connection.close()
                self.connection = None
                self.failures = 1
                self.lost = True
                continue
            if message is _SILENT:
                continue
            event = _event_of(message)
            if event is not None:
                return event


def _event_of(message: Any) -> TaskEvent | None:
    """The event in a pub/sub ``message`` push, or None (another push, or not an event)."""
    if not (isinstance(message, list) and len(message) == 3 and message[0] == b"message"):
        return None
    try:
        data = json.loads(message[2])
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


# ----------------------------------------------------------------------------- store URLs
