"""Tests for the newline-delimited stdio transport (framing, limits, concurrency, subprocesses)."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import textwrap
import time
from collections import deque
from collections.abc import Iterable, Sequence

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.protocol import jsonrpc
from trio_mcp.transports.base import MessageTooLarge, Transport
from trio_mcp.transports.stdio import (
    RECEIVE_CHUNK_SIZE,
    StreamTransport,
    SubprocessTransport,
    open_subprocess_transport,
)

# ----------------------------------------------------------------------------- helpers


class ScriptedReceiveStream(trio.abc.ReceiveStream):
    """Returns exactly the given chunks, one per ``receive_some``, then EOF; counts the reads."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = deque(chunks)
        self.reads = 0
        self.closed = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise trio.ClosedResourceError
        self.reads += 1
        if not self._chunks:
            return b""
        chunk = self._chunks.popleft()
        assert max_bytes is None or len(chunk) <= max_bytes
        return chunk

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


class TricklingSendStream(trio.abc.SendStream):
    """Writes a few bytes at a time with a checkpoint in between, like a slow pipe.

    It does no conflict detection, so concurrent unserialised ``send_all`` calls would interleave.
    """

    def __init__(self, piece: int = 7) -> None:
        self.data = bytearray()
        self._piece = piece
        self.closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            raise trio.ClosedResourceError
        view = memoryview(data)
        for start in range(0, len(view), self._piece):
            await trio.lowlevel.checkpoint()
            self.data += view[start : start + self._piece]

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


def scripted(
    chunks: Iterable[bytes], max_message_size: int = 1024
) -> tuple[StreamTransport, ScriptedReceiveStream]:
    stream = ScriptedReceiveStream(chunks)
    send_stream, _ = trio.testing.memory_stream_one_way_pair()
    return StreamTransport(stream, send_stream, max_message_size=max_message_size), stream


def split_every(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def receive_all(transport: StreamTransport) -> list[bytes]:
    """Every message until EOF (MessageTooLarge propagates)."""
    messages = []
    while True:
        try:
            messages.append(await transport.receive_line())
        except trio.EndOfChannel:
            return messages


async def assert_eof(transport: StreamTransport) -> None:
    for _ in range(2):  # EOF is sticky
        with pytest.raises(trio.EndOfChannel):
            await transport.receive_line()


# ----------------------------------------------------------------------------- framing


def test_stream_transport_satisfies_the_protocol() -> None:
    transport: Transport = scripted([])[0]
    assert transport is not None


async def test_many_lines_in_one_chunk_need_one_read() -> None:
    transport, stream = scripted([b'{"a":1}\n{"b":2}\n{"c":3}\n'])
    assert await transport.receive_line() == b'{"a":1}'
    assert await transport.receive_line() == b'{"b":2}'
    assert await transport.receive_line() == b'{"c":3}'
    assert stream.reads == 1  # all three lines came out of the first chunk
    await assert_eof(transport)
    assert stream.reads == 2  # one more read to see EOF, and no read after EOF


async def test_returned_messages_are_bytes() -> None:
    class BytearrayStream(ScriptedReceiveStream):
        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            return bytearray(await super().receive_some(max_bytes))  # type: ignore[return-value]

    transport = StreamTransport(BytearrayStream([b"ab\ncd\n"]), trio.testing.memory_stream_one_way_pair()[0])
    messages = await receive_all(transport)
    assert messages == [b"ab", b"cd"]
    assert all(type(m) is bytes for m in messages)


async def test_line_split_over_many_chunks() -> None:
    message = bytes(range(32, 127)) * 100  # 9500 bytes
    transport, _ = scripted([*split_every(message, 100), b"\nnext\n"], max_message_size=10_000)
    assert await transport.receive_line() == message
    assert await transport.receive_line() == b"next"
    await assert_eof(transport)


async def test_one_byte_chunks() -> None:
    data = b'{"jsonrpc":"2.0"}\n\n{"id":1}\r\nlast'
    transport, _ = scripted(split_every(data, 1))
    assert await receive_all(transport) == [b'{"jsonrpc":"2.0"}', b'{"id":1}', b"last"]


async def test_crlf_is_stripped_once_even_across_chunks() -> None:
    transport, _ = scripted([b"a\r\nb\r", b"\nc\r\r\nd\re\n", b"\r", b"\n"])
    # Only one trailing \r goes; an inner \r is data; a line that was just "\r" is blank.
    assert await receive_all(transport) == [b"a", b"b", b"c\r", b"d\re"]


async def test_blank_and_whitespace_lines_are_skipped() -> None:
    transport, _ = scripted([b"\n\n  \n\t\r\n", b"a\n \n", b"  ", b"\n", b" b \n\n"])
    assert await receive_all(transport) == [b"a", b" b "]  # other whitespace is kept


async def test_final_unterminated_line_is_returned_before_eof() -> None:
    transport, _ = scripted([b"a\nb", b"c"])
    assert await transport.receive_line() == b"a"
    assert await transport.receive_line() == b"bc"
    await assert_eof(transport)


@pytest.mark.parametrize("tail", [b"z\r", b"  ", b"\r"])
async def test_final_unterminated_line_variants(tail: bytes) -> None:
    transport, _ = scripted([b"a\n" + tail])
    expected = [b"a", b"z"] if tail.strip() else [b"a"]
    assert await receive_all(transport) == expected


async def test_eof_on_empty_input() -> None:
    transport, _ = scripted([])
    await assert_eof(transport)


# ------------------------------------------------------------------------- size limit


async def test_oversized_line_raises_once_then_next_line_is_fine() -> None:
    transport, _ = scripted([b"x" * 11 + b"\nok\n"], max_message_size=10)
    with pytest.raises(MessageTooLarge) as info:
        await transport.receive_line()
    assert info.value.limit == 10
    assert await transport.receive_line() == b"ok"
    await assert_eof(transport)


async def test_oversized_line_across_chunks_is_discarded_without_buffering() -> None:
    chunks = [*split_every(b"x" * 300, 3), b"\nok\n"]
    transport, stream = scripted(chunks, max_message_size=10)
    with pytest.raises(MessageTooLarge):
        await transport.receive_line()
    # Raised as soon as the excess arrived, long before the line ended...
    assert stream.reads == 4
    # ...and the rest of the line is skipped without raising again.
    assert await transport.receive_line() == b"ok"
    assert stream.reads == len(chunks)
    assert len(transport._partial) == 0
    await assert_eof(transport)


async def test_consecutive_oversized_lines_each_raise_once() -> None:
    transport, _ = scripted([b"x" * 20 + b"\n" + b"y" * 5, b"y" * 20 + b"\nok\n"], max_message_size=10)
    for _ in range(2):
        with pytest.raises(MessageTooLarge):
            await transport.receive_line()
    assert await transport.receive_line() == b"ok"
    await assert_eof(transport)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"x" * 10 + b"\n"],
        [b"x" * 10 + b"\r\n"],
        [b"x" * 5, b"x" * 5, b"\n"],
        [b"x" * 10, b"\r", b"\n"],
        [b"x" * 10 + b"\r", b"\n"],
        [b"x" * 10],  # unterminated at EOF
        [b"x" * 10 + b"\r"],  # unterminated at EOF
    ],
)
async def test_line_of_exactly_the_limit_is_accepted(chunks: list[bytes]) -> None:
    terminated = chunks[-1].endswith(b"\n")
    transport, _ = scripted(
        [*chunks[:-1], chunks[-1] + b"ok\n"] if terminated else chunks, max_message_size=10
    )
    assert await transport.receive_line() == b"x" * 10
    if terminated:
        assert await transport.receive_line() == b"ok"
    await assert_eof(transport)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"x" * 11 + b"\n"],
        [b"x" * 11 + b"\r\n"],
        [b"x" * 6, b"x" * 5, b"\n"],
        [b"x" * 11, b"\n"],  # the partial line is limit + 1: only the newline proves it too long
        [b"x" * 10, b"x\r\n"],
        [b"x" * 11],  # unterminated at EOF
        [b"x" * 5, b"x" * 6 + b"\r"],  # unterminated at EOF
        [b"x" * 50],  # still being discarded at EOF
    ],
)
async def test_line_one_over_the_limit_is_rejected(chunks: list[bytes]) -> None:
    terminated = chunks[-1].endswith(b"\n")
    transport, _ = scripted(
        [*chunks[:-1], chunks[-1] + b"ok\n"] if terminated else chunks, max_message_size=10
    )
    with pytest.raises(MessageTooLarge):
        await transport.receive_line()
    if terminated:
        assert await transport.receive_line() == b"ok"
    await assert_eof(transport)


# --------------------------------------------------------------------------- receiving


async def test_receive_in_large_chunks() -> None:
    requested: list[int | None] = []

    class Recording(ScriptedReceiveStream):
        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            requested.append(max_bytes)
            return await super().receive_some(max_bytes)

    transport = StreamTransport(Recording([b"a\n"]), trio.testing.memory_stream_one_way_pair()[0])
    await receive_all(transport)
    assert requested == [RECEIVE_CHUNK_SIZE, RECEIVE_CHUNK_SIZE]
    assert RECEIVE_CHUNK_SIZE >= 65536


async def test_concurrent_receive_is_refused() -> None:
    send_stream, receive_stream = trio.testing.memory_stream_one_way_pair()
    transport = StreamTransport(receive_stream, trio.testing.memory_stream_one_way_pair()[0])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.receive)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await transport.receive_line()
        await send_stream.send_all(b"hi\n")


async def test_cancelled_receive_loses_nothing() -> None:
    send_stream, receive_stream = trio.testing.memory_stream_one_way_pair()
    transport = StreamTransport(receive_stream, trio.testing.memory_stream_one_way_pair()[0])
    await send_stream.send_all(b"one\ntw")
    with trio.CancelScope() as scope:
        scope.cancel()
        await transport.receive_line()  # cancelled before it takes "one"
    assert scope.cancelled_caught
    assert await transport.receive_line() == b"one"
    with trio.move_on_after(1) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport.receive)  # blocks: "tw" is incomplete
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    await send_stream.send_all(b"o\n")
    assert await transport.receive_line() == b"two"


async def test_bidirectional_pair_round_trip() -> None:
    left, right = trio.testing.memory_stream_pair()
    a = StreamTransport(left, left)
    b = StreamTransport(right, right)
    async with a, b:
        await a.send(b'{"id":1}')
        assert await b.receive_line() == b'{"id":1}'
        await b.send(b'{"id":1,"result":{}}')
        assert await a.receive_line() == b'{"id":1,"result":{}}'
        await a.send_eof()
        with pytest.raises(trio.EndOfChannel):
            await b.receive_line()


async def test_lockstep_round_trip() -> None:
    left, right = trio.testing.lockstep_stream_pair()
    sender = StreamTransport(trio.testing.memory_stream_one_way_pair()[1], left)
    receiver = StreamTransport(right, trio.testing.memory_stream_one_way_pair()[0])
    messages = [b"m%d" % i * (i + 1) for i in range(50)]
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:

        async def send_them() -> None:
            for message in messages:
                await sender.send(message)
            await sender.send_eof()

        nursery.start_soon(send_them)
        received = await receive_all(receiver)
    assert received == messages


# ----------------------------------------------------------------------------- sending


async def test_send_frames_with_newline() -> None:
    send_stream, receive_stream = trio.testing.memory_stream_one_way_pair()
    transport = StreamTransport(trio.testing.memory_stream_one_way_pair()[1], send_stream)
    await transport.send(b'{"a":1}')
    await transport.send(b"")
    assert await receive_stream.receive_some() == b'{"a":1}\n\n'


async def test_send_refuses_embedded_newline() -> None:
    stream = TricklingSendStream()
    transport = StreamTransport(ScriptedReceiveStream([]), stream)
    with pytest.raises(ValueError, match="newline"):
        await transport.send(b'{"a":\n1}')
    assert stream.data == b""
    await transport.send(b"fine")  # the transport is still usable
    assert stream.data == b"fine\n"


async def test_concurrent_senders_never_interleave() -> None:
    stream = TricklingSendStream(piece=3)
    transport = StreamTransport(ScriptedReceiveStream([]), stream)
    messages = [bytes([65 + i]) * (10 + 13 * i) for i in range(20)]
    async with trio.open_nursery() as nursery:
        for message in messages:
            nursery.start_soon(transport.send, message)
    frames = bytes(stream.data).split(b"\n")
    assert frames[-1] == b""
    assert sorted(frames[:-1]) == sorted(messages)


async def test_send_after_peer_closed_is_broken_resource() -> None:
    send_stream, receive_stream = trio.testing.memory_stream_one_way_pair()
    transport = StreamTransport(trio.testing.memory_stream_one_way_pair()[1], send_stream)
    await receive_stream.aclose()
    with pytest.raises(trio.BrokenResourceError):
        await transport.send(b"hello")


@pytest.mark.skipif(sys.platform == "win32", reason="FdStream is Unix-only")
async def test_send_to_closed_pipe_is_broken_resource() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    transport = StreamTransport(
        trio.testing.memory_stream_one_way_pair()[1], trio.lowlevel.FdStream(write_fd)
    )
    async with transport:
        with pytest.raises(trio.BrokenResourceError):
            await transport.send(b"hello")


@pytest.mark.skipif(sys.platform == "win32", reason="FdStream is Unix-only")
async def test_send_many_within_a_time_to_a_pipe(autojump_clock: trio.testing.MockClock) -> None:
    """``send_many_within`` (what a connection's writer uses): a batch the pipe takes is
    written whole, at once; one a peer that does not read leaves waiting is abandoned after
    the time given (False), part-way, and the transport is broken from then on."""
    read_fd, write_fd = os.pipe()
    reader = trio.lowlevel.FdStream(read_fd)
    writer = trio.lowlevel.FdStream(write_fd)
    transport = StreamTransport(trio.testing.memory_stream_one_way_pair()[1], writer)
    async with transport, reader:
        assert await transport.send_many_within([b'{"a":1}', b'{"b":2}'], 5) is True
        assert await reader.receive_some() == b'{"a":1}\n{"b":2}\n'
        big = [b"x" * 65536] * 64  # 4 MiB: more than a pipe holds
        began = trio.current_time()
        assert await transport.send_many_within(big, 5) is False
        assert trio.current_time() - began == 5
        assert len(await reader.receive_some(1 << 20)) > 0  # part of it went out
        with pytest.raises(trio.BrokenResourceError):
            await transport.send(b"next")


async def test_send_interrupted_mid_frame_breaks_the_transport() -> None:
    stream = TricklingSendStream(piece=2)
    transport = StreamTransport(ScriptedReceiveStream([]), stream)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport.send, b"0123456789")
            while not stream.data:
                await trio.lowlevel.checkpoint()
            scope.cancel()
    assert 0 < len(stream.data) < 11  # half a frame went out
    with pytest.raises(trio.BrokenResourceError):
        await transport.send(b"next")


async def test_send_cancelled_before_writing_keeps_the_transport() -> None:
    stream = TricklingSendStream()
    transport = StreamTransport(ScriptedReceiveStream([]), stream)
    with trio.CancelScope() as scope:
        scope.cancel()
        await transport.send(b"never")
    assert stream.data == b""
    await transport.send(b"ok")
    assert stream.data == b"ok\n"


async def test_closed_transport_refuses_send_and_receive() -> None:
    transport, stream = scripted([b"a\n"])
    await transport.aclose()
    await transport.aclose()  # idempotent
    assert stream.closed
    with pytest.raises(trio.ClosedResourceError):
        await transport.receive_line()
    with pytest.raises(trio.ClosedResourceError):
        await transport.send(b"x")


async def test_send_after_send_eof_is_closed_not_broken() -> None:
    transport, _ = scripted([])
    await transport.send_eof()
    for _ in range(2):
        with pytest.raises(trio.ClosedResourceError):
            await transport.send(b"x")


# ----------------------------------------------------------------------------- property

message_bytes = st.binary(min_size=1, max_size=300).filter(
    lambda m: b"\n" not in m and b"\r" not in m and m.strip()
)


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(message_bytes, max_size=20),
    crlf=st.lists(st.booleans(), min_size=20, max_size=20),
    terminate_last=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
)
def test_round_trip_at_arbitrary_chunk_boundaries(
    messages: list[bytes], crlf: list[bool], terminate_last: bool, cuts: list[int]
) -> None:
    data = b"".join(m + (b"\r\n" if cr else b"\n") for m, cr in zip(messages, crlf, strict=False))
    if messages and not terminate_last:
        data = data.rstrip(b"\r\n")
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]

    async def main() -> list[bytes]:
        transport, _ = scripted(chunks, max_message_size=300)
        return await receive_all(transport)

    assert trio.run(main) == messages


def reference_lines(data: bytes, limit: int) -> list[bytes | None]:
    """What the module docstring promises for ``data`` (None: MessageTooLarge): lines split
    on LF, one trailing CR dropped, blank lines skipped unless over the limit."""
    out: list[bytes | None] = []
    for line in data.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > limit:
            out.append(None)
        elif line and not line.isspace():
            out.append(line)
    return out


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"x")), max_size=12),
    blanks=st.lists(st.sampled_from([b"", b" ", b"\t \r", b"\r"]), max_size=12),
    crlf=st.lists(st.booleans(), min_size=24, max_size=24),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
    limit=st.integers(min_value=1, max_value=10),
)
def test_blank_and_oversized_lines_at_arbitrary_chunk_boundaries(
    lines: list[bytes], blanks: list[bytes], crlf: list[bool], cuts: list[int], limit: int
) -> None:
    mixed = [x for pair in itertools.zip_longest(lines, blanks) for x in pair if x is not None]
    data = b"".join(m + (b"\r\n" if cr else b"\n") for m, cr in zip(mixed, crlf, strict=False))
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]

    async def main() -> list[bytes | None]:
        transport, _ = scripted(chunks, max_message_size=limit)
        got: list[bytes | None] = []
        while True:
            try:
                got.append(await transport.receive_line())
            except MessageTooLarge:
                got.append(None)
            except trio.EndOfChannel:
                return got

    assert trio.run(main) == reference_lines(data, limit)


# ------------------------------------------------------------------------- subprocesses

ECHO = textwrap.dedent(
    """
    import sys
    while line := sys.stdin.buffer.readline():
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    """
)

STUBBORN = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    time.sleep(60)
    """
)

IGNORES_EOF = textwrap.dedent(
    """
    import sys, time
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    time.sleep(60)
    """
)

STDIO_SERVER = textwrap.dedent(
    """
    import os, trio
    from trio_mcp.transports.stdio import open_stdio_transport

    async def main():
        async with open_stdio_transport(max_message_size=100) as transport:
            while True:
                try:
                    message = await transport.receive_line()
                except trio.EndOfChannel:
                    break
                except Exception as exc:
                    await transport.send(type(exc).__name__.encode())
                    continue
                await transport.send(message.upper())
        # The real fds survived the transport, and are blocking again.
        os.write(1, b"after %d %d\\n" % (os.get_blocking(0), os.get_blocking(1)))

    trio.run(main)
    """
)


def python(script: str) -> Sequence[str]:
    return [sys.executable, "-c", script]


def assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


async def test_subprocess_echo_and_graceful_exit() -> None:
    async with open_subprocess_transport(python(ECHO)) as transport:
        assert isinstance(transport, SubprocessTransport)
        for message in [b'{"id":1}', b'{"id":2}', "ünïcode".encode()]:
            await transport.send(message)
            assert await transport.receive_line() == message
        process = transport.process
        assert process.returncode is None
    assert process.returncode == 0  # exited on its own after stdin closed
    assert_reaped(process.pid)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_subprocess_ignoring_eof_gets_sigterm() -> None:
    async with open_subprocess_transport(python(IGNORES_EOF), shutdown_timeout=0.2) as transport:
        assert await transport.receive_line() == b"ready"
    assert transport.process.returncode == -signal.SIGTERM
    assert_reaped(transport.process.pid)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_subprocess_ignoring_eof_and_sigterm_gets_killed() -> None:
    start = time.monotonic()
    async with open_subprocess_transport(python(STUBBORN), shutdown_timeout=0.2) as transport:
        assert await transport.receive_line() == b"ready"  # its SIGTERM handler is installed
        shutdown_start = time.monotonic()
    assert transport.process.returncode == -signal.SIGKILL
    assert_reaped(transport.process.pid)
    assert time.monotonic() - shutdown_start < 1.5
    assert time.monotonic() - start < 2.0


async def test_subprocess_is_reaped_when_cancelled() -> None:
    with trio.CancelScope() as scope:
        async with open_subprocess_transport(python(ECHO), shutdown_timeout=0.2) as transport:
            scope.cancel()
            await transport.receive_line()
    assert scope.cancelled_caught
    assert transport.process.returncode is not None
    assert_reaped(transport.process.pid)


async def test_subprocess_command_must_be_a_list() -> None:
    with pytest.raises(TypeError):
        async with open_subprocess_transport("echo hi"):
            pass  # pragma: no cover


@pytest.mark.skipif(sys.platform == "win32", reason="FdStream is Unix-only")
async def test_stdio_server_end_to_end() -> None:
    async with open_subprocess_transport(python(STDIO_SERVER)) as transport:
        await transport.send(b'{"method":"ping"}')
        assert await transport.receive_line() == b'{"METHOD":"PING"}'
        await transport.send(b"x" * 101)
        assert await transport.receive_line() == b"MessageTooLarge"
        await transport.send(b"still here")
        assert await transport.receive_line() == b"STILL HERE"
        await transport.send_eof()
        assert await transport.receive_line() == b"after 1 1"
        with pytest.raises(trio.EndOfChannel):
            await transport.receive_line()
    assert transport.process.returncode == 0


async def test_send_many_writes_every_message_framed_in_one_write() -> None:
    from trio_mcp.transports.stdio import StreamTransport

    writes: list[bytes] = []

    class Recorder(trio.abc.SendStream):
        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            writes.append(bytes(data))

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

    _, receive = trio.testing.memory_stream_one_way_pair()
    transport = StreamTransport(receive, Recorder())
    await transport.send_many([b'{"a":1}', b'{"b":2}', b"{}"])
    assert writes == [b'{"a":1}\n{"b":2}\n{}\n']
    for refused in ([b"ok", b"bad\nline"], [b"\n"], [b"a\n", b"b"]):
        with pytest.raises(ValueError):
            await transport.send_many(refused)
    assert len(writes) == 1  # nothing of a refused batch is written
    await transport.send_many([])
    assert len(writes) == 1  # no messages: nothing written (not even a blank line)


async def test_receive_hands_on_parsed_messages_and_unreadable_values() -> None:
    # What the runtime reads: a message parsed once, input that is not one as a value to
    # answer, a line over the limit skipped and reported once; the next line still comes.
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    transport, _ = scripted([ping + b"\nnot json\n" + b"x" * 70 + b"\n" + ping + b"\n"], max_message_size=60)
    first = await transport.receive()
    assert isinstance(first, jsonrpc.Request) and first.method == "ping"
    garbage = await transport.receive()
    assert isinstance(garbage, jsonrpc.Unreadable) and garbage.response.error.code == -32700
    oversized = await transport.receive()
    assert isinstance(oversized, jsonrpc.Unreadable) and "60 byte limit" in oversized.response.error.message
    again = await transport.receive()
    assert isinstance(again, jsonrpc.Request) and again.id == 1
