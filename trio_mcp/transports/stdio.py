"""MCP's stdio transport: newline-delimited JSON-RPC messages over a pair of byte streams.

Framing is the one the MCP specification gives for stdio: every message is one line of UTF-8,
terminated by ``\\n``, and a message never contains an embedded newline. Nothing but messages
may appear on the stream, so a *server* using :func:`open_stdio_transport` must log to
**stderr only** (a stray ``print()`` corrupts the protocol stream).

:class:`StreamTransport` guarantees:

* **Sending.** ``send(message)`` writes ``message + b"\\n"`` as one ``send_all`` call, under a
  :class:`trio.Lock`, so frames from concurrent senders never interleave (the lock is fair:
  senders go out in the order they arrived). A message containing ``b"\\n"`` is refused with
  :class:`ValueError` before anything is written. If the peer is gone, ``send`` raises
  :class:`trio.BrokenResourceError`. If a write is interrupted part-way (cancelled, or it
  failed), the peer may have received half a frame, so the transport refuses all later sends
  with :class:`trio.BrokenResourceError` instead of corrupting the stream further; a send that
  is cancelled *before* it starts writing does not break the transport.
* **Receiving.** ``receive()`` returns the next message, parsed once
  (:func:`~trio_mcp.protocol.jsonrpc.read`: an ``Unreadable`` value for a line that is not
  one); ``receive_line()`` the next line itself, without its ``\\n`` (and without one
  trailing ``\\r``, so CRLF peers work). Empty and whitespace-only lines are skipped. At end of
  input both raise :class:`trio.EndOfChannel`, after first returning a final line that was not
  newline-terminated. Message bytes are otherwise returned exactly as received.
* **Bounded memory.** A line longer than ``max_message_size`` bytes (not counting the
  ``\\r\\n``/``\\n`` terminator) is reported exactly once, as soon as the excess is seen —
  ``receive()`` returns :func:`~trio_mcp.protocol.jsonrpc.too_large`, ``receive_line()``
  raises :class:`~trio_mcp.transports.base.MessageTooLarge` — and the rest of that line is
  read and thrown away without being buffered; the next call returns the line after it. The
  transport never holds more than about ``max_message_size`` plus one read chunk (64 KiB).
  (A *whitespace-only* line longer than the limit counts as oversized too.)
* **Efficiency.** Input is read in 64 KiB chunks; newlines are found with ``bytes.find`` on
  each byte only once, so a long line split over many chunks costs linear time, and every
  line already in the buffer is returned without another read.
* **Checkpoints.** ``receive()`` is always a cancellation point, and it is a full Trio
  checkpoint (schedule point too) whenever it has to read from the stream, i.e. at least once
  per chunk; a line that is already buffered is returned without yielding to the scheduler,
  which keeps the per-message cost close to raw stdio. Cancelling ``receive()`` never loses
  data. ``send()`` is a full checkpoint.
* **Concurrency.** Any number of tasks may ``send`` concurrently; only one task may
  ``receive`` at a time (a second one gets :class:`trio.BusyResourceError`).

Entry points: :func:`open_stdio_transport` (a server speaking on its own stdin/stdout) and
:func:`open_subprocess_transport` (a client that spawns a server as a child process).
"""

from __future__ import annotations

import errno
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import trio

from ..protocol import jsonrpc
from .base import DEFAULT_MAX_MESSAGE_SIZE, MessageTooLarge

__all__ = [
    "RECEIVE_CHUNK_SIZE",
    "StreamTransport",
    "SubprocessTransport",
    "open_stdio_transport",
    "open_subprocess_transport",
]

RECEIVE_CHUNK_SIZE = 65536
"""How many bytes :meth:`StreamTransport.receive` asks the stream for at a time."""

_NEWLINE = b"\n"
_CR = 0x0D  # b"\r"[0]


class StreamTransport(trio.abc.AsyncResource):
    """Newline-delimited messages over a pair of trio streams.

    ``receive_stream`` and ``send_stream`` may be the same object (e.g. a
    :class:`trio.SocketStream`). The transport owns both: :meth:`aclose` closes them. It is an
    async context manager (``async with StreamTransport(r, s) as transport: ...``).
    See the module docstring for the exact guarantees.
    """

    __slots__ = (
        "_chunk",
        "_closed",
        "_discarding",
        "_eof",
        "_partial",
        "_pos",
        "_receive_stream",
        "_receiving",
        "_send_broken",
        "_send_fd",
        "_send_lock",
        "_send_stream",
        "max_message_size",
    )

    def __init__(
        self,
        receive_stream: trio.abc.ReceiveStream,
        send_stream: trio.abc.SendStream,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        if max_message_size < 1:
            raise ValueError("max_message_size must be at least 1")
        self._receive_stream = receive_stream
        self._send_stream = send_stream
        self.max_message_size = max_message_size
        """Largest message accepted by :meth:`receive`, in bytes, without the line terminator."""
        self._send_lock = trio.Lock()
        self._send_broken = False
        # A file descriptor's stream (stdio, a subprocess's pipes): what it takes at once is
        # written without send_all's waiting machinery (see _write).
        fd_stream = getattr(trio.lowlevel, "FdStream", None)  # (Unix only)
        self._send_fd = send_stream if fd_stream is not None and isinstance(send_stream, fd_stream) else None
        self._closed = False
        self._receiving = False
        # Receive state. ``_chunk[_pos:]`` is read but not yet consumed. ``_partial`` holds the
        # beginning of a line whose newline has not arrived; it never contains b"\n", so it is
        # never searched again. ``_discarding``: we are skipping the rest of an oversized line.
        self._chunk = b""
        self._pos = 0
        self._partial = bytearray()
        self._discarding = False
        self._eof = False

    # ------------------------------------------------------------------ sending

    async def send(self, message: bytes) -> None:
        """Send one message, framed as ``message + b"\\n"``.

        Raises:
          ValueError: ``message`` contains ``b"\\n"`` (nothing is sent).
          trio.BrokenResourceError: the peer is gone, or an earlier send was interrupted
            part-way so the stream can no longer be trusted.
          trio.ClosedResourceError: this transport (or its sending half) was closed.
        """
        if message.find(_NEWLINE) >= 0:  # (not ``in``, which first tries an int: slower)
            raise ValueError("a stdio message must not contain a newline")
        await self._write(message + _NEWLINE)

    async def send_many(self, messages: Sequence[bytes]) -> None:
        """Send several messages with one write: same framing and errors as :meth:`send`
        (none: nothing is written, and it is still a checkpoint)."""
        await self.send_many_within(messages, math.inf)

    async def send_many_within(self, messages: Sequence[bytes], seconds: float) -> bool:
        """:meth:`send_many`, given at most ``seconds`` to be taken by the peer: False
        if it was not (the write is abandoned part-way, and the transport is broken from then
        on). A batch the peer takes at once, the usual case, costs no timer (a cancel scope
        costs about as much as a small request): only a write that has to wait gets one."""
        if not messages:
            await trio.lowlevel.checkpoint()
            return True
        # One memchr over the batch (count() tests byte by byte; ``in`` per message costs a
        # failed integer conversion each).
        if b"".join(messages).find(_NEWLINE) >= 0:
            raise ValueError("a stdio message must not contain a newline")
        return await self._write(_NEWLINE.join(messages) + _NEWLINE, seconds)

    async def _write(self, frame: bytes, seconds: float = math.inf) -> bool:
        # The lock only makes concurrent senders take turns; uncontended (the usual case: one
        # writer task) it is taken without a scheduler round trip. The write is a checkpoint.
        lock = self._send_lock
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            if self._closed:
                raise trio.ClosedResourceError("transport was closed")
            if self._send_broken:
                raise trio.BrokenResourceError("an earlier send was interrupted in the middle of a frame")
            # If we are already cancelled, fail here, where it is known that nothing was written.
            await trio.lowlevel.checkpoint_if_cancelled()
            sent = self._write_now(frame) if self._send_fd is not None else 0
            if sent == len(frame):
                await trio.lowlevel.cancel_shielded_checkpoint()
                return True
            rest = memoryview(frame)[sent:]
            if seconds == math.inf:
                await self._send_rest(rest)
                return True
            with trio.move_on_after(seconds) as timer:
                await self._send_rest(rest)
            return not timer.cancelled_caught
        finally:
            lock.release()

    def _write_now(self, frame: bytes) -> int:
        """What of ``frame`` the file descriptor takes without waiting (it is non-blocking:
        FdStream made it so), as FdStream's send_all would write it."""
        assert self._send_fd is not None
        try:
            return os.write(self._send_fd.fileno(), frame)
        except BlockingIOError:
            return 0
        except OSError as exc:
            if exc.errno == errno.EBADF:  # closed locally (send_eof): reported as closed
                raise trio.ClosedResourceError("file was already closed") from None
            self._send_broken = True
            raise trio.BrokenResourceError from exc

    async def _send_rest(self, data: memoryview) -> None:
        try:
            await self._send_stream.send_all(data)
        except trio.ClosedResourceError:
            raise  # closed locally (aclose/send_eof): keep reporting it as closed
        except BaseException:
            self._send_broken = True
            raise

    async def send_eof(self) -> None:
        """Close the sending half only: the peer sees end of input, and we can still receive.

        Later calls to :meth:`send` raise :class:`trio.ClosedResourceError`. Idempotent.
        """
        await self._send_stream.aclose()

    # ---------------------------------------------------------------- receiving

    async def receive(self) -> jsonrpc.Received:
        """The next message, parsed (see :meth:`receive_line` for what raises)."""
        # receive_line's commonest case, taken here too: a message already buffered costs no
        # second coroutine.
        if not self._receiving and not self._closed:
            await trio.lowlevel.checkpoint_if_cancelled()
            found = self._whole_line()
            if found is not None:
                return jsonrpc.read(found)
        try:
            line = await self.receive_line()
        except MessageTooLarge as exc:
            return jsonrpc.too_large(exc.limit)
        return jsonrpc.read(line)

    def _whole_line(self) -> bytes | None:
        """The commonest case, taken: a whole LF-terminated line of the current chunk, with
        nothing carried over and nothing being skipped. None for anything else (the loop of
        :meth:`receive_line`). Never waits: callers checkpoint before it."""
        chunk = self._chunk
        pos = self._pos
        nl = chunk.find(_NEWLINE, pos)
        if (
            nl > pos
            and nl - pos <= self.max_message_size
            and chunk[nl - 1] != _CR
            and not self._partial
            and not self._discarding
        ):
            found = chunk[pos:nl]
            if not found.isspace():
                self._pos = nl + 1
                return found
        return None

    async def receive_line(self) -> bytes:
        """Return the next non-blank line, without its terminator.

        Raises:
          trio.EndOfChannel: the input ended (cleanly), and every line has been returned.
          MessageTooLarge: the next line exceeds :attr:`max_message_size`; it is skipped.
          trio.BusyResourceError: another task is already in ``receive()``.
          trio.ClosedResourceError: this transport was closed.
          trio.BrokenResourceError: the underlying stream failed.
        """
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving on this transport")
        if self._closed:
            raise trio.ClosedResourceError("transport was closed")
        # Cancellation point before any state changes, so a cancelled receive never loses a line.
        await trio.lowlevel.checkpoint_if_cancelled()
        found = self._whole_line()
        if found is not None:
            return found
        self._receiving = True
        try:
            while True:
                line = self._next_buffered_line()
                if line is not None:
                    return line
                if self._eof:
                    line = self._take_final_line()
                    if line is not None:
                        return line
                    raise trio.EndOfChannel
                # Cancelling this await is safe: nothing has been consumed yet.
                data = await self._receive_stream.receive_some(RECEIVE_CHUNK_SIZE)
                if data:
                    # Slices of the chunk are returned as messages, so they must be bytes.
                    self._chunk = data if type(data) is bytes else bytes(data)
                    self._pos = 0
                else:
                    self._eof = True
        finally:
            self._receiving = False

    def _next_buffered_line(self) -> bytes | None:
        """Consume and return the next complete non-blank line from ``_chunk``, or None.

        Anything left of the chunk without a newline moves into ``_partial`` (or is dropped while
        discarding). State is written back before :class:`MessageTooLarge` is raised.
        """
        chunk = self._chunk
        pos = self._pos
        size = len(chunk)
        limit = self.max_message_size
        partial = self._partial
        while pos < size:
            nl = chunk.find(_NEWLINE, pos)
            if self._discarding:
                if nl < 0:
                    break  # the whole rest of the chunk belongs to the oversized line
                self._discarding = False
                pos = nl + 1
                continue
            if nl < 0:
                # Incomplete line. Allow limit + 1 bytes: the last may be the \r of a CRLF.
                if len(partial) + size - pos > limit + 1:
                    partial.clear()
                    self._discarding = True
                    self._chunk = b""
                    self._pos = 0
                    raise MessageTooLarge(limit)
                partial += chunk if pos == 0 else memoryview(chunk)[pos:]
                break
            end = nl
            if partial:
                if end > pos:
                    if chunk[end - 1] == _CR:
                        end -= 1
                elif partial[-1] == _CR:
                    del partial[-1]
                if len(partial) + end - pos > limit:
                    partial.clear()
                    self._pos = nl + 1
                    raise MessageTooLarge(limit)
                partial += memoryview(chunk)[pos:end]
                line = bytes(partial)
                partial.clear()
            else:
                if end > pos and chunk[end - 1] == _CR:
                    end -= 1
                if end - pos > limit:
                    self._pos = nl + 1
                    raise MessageTooLarge(limit)
                line = chunk[pos:end]
            pos = nl + 1
            if line and not line.isspace():
                self._pos = pos
                return line
        # Chunk used up: drop our reference to it.
        self._chunk = b""
        self._pos = 0
        return None

    def _take_final_line(self) -> bytes | None:
        """At EOF: the unterminated last line, if there is a non-blank one."""
        self._discarding = False
        partial = self._partial
        if not partial:
            return None
        if partial[-1] == _CR:
            del partial[-1]
        line = bytes(partial)
        partial.clear()
        if len(line) > self.max_message_size:
            raise MessageTooLarge(self.max_message_size)
        if not line or line.isspace():
            return None
        return line

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        """Close both streams. Idempotent; later sends and receives raise ClosedResourceError."""
        self._closed = True
        try:
            await self._send_stream.aclose()
        finally:
            await self._receive_stream.aclose()  # idempotent, even if it is the same stream


# ---------------------------------------------------------------------------- servers


@asynccontextmanager
async def open_stdio_transport(
    *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> AsyncIterator[StreamTransport]:
    """A transport on this process's stdin and stdout, for an MCP server (Unix only).

    An async context manager::

        async with open_stdio_transport() as transport:
            await serve(transport)

    It wraps :func:`os.dup` copies of file descriptors 0 and 1 in
    :class:`trio.lowlevel.FdStream`, so closing the transport (on leaving the block) closes only
    the copies: the real stdin/stdout stay open, and :data:`sys.stdout` is never touched by Trio.
    :data:`sys.stdout` is flushed on entry so nothing written earlier lands between frames.

    Caveats:

    * The server must log to **stderr only**; anything else written to stdout corrupts the
      protocol stream.
    * ``FdStream`` puts the underlying open files in non-blocking mode, which is shared by every
      descriptor referring to them (including fds 0/1 and :data:`sys.stdin`/:data:`sys.stdout`).
      Don't use ``sys.stdin``/``sys.stdout`` while the transport is open; the original blocking
      mode is restored when it closes.
    """
    if sys.platform == "win32":  # pragma: no cover
        raise NotImplementedError("open_stdio_transport needs trio.lowlevel.FdStream, which is Unix-only")
    else:
        sys.stdout.flush()
        stdin_fd = os.dup(0)
        try:
            stdout_fd = os.dup(1)
        except BaseException:
            os.close(stdin_fd)
            raise
        try:
            receive_stream = trio.lowlevel.FdStream(stdin_fd)
        except BaseException:
            os.close(stdin_fd)
            os.close(stdout_fd)
            raise
        try:
            send_stream = trio.lowlevel.FdStream(stdout_fd)
        except BaseException:
            os.close(stdout_fd)
            receive_stream.close()
            raise
        async with StreamTransport(
            receive_stream, send_stream, max_message_size=max_message_size
        ) as transport:
            yield transport


# ---------------------------------------------------------------------------- clients


class SubprocessTransport(StreamTransport):
    """A :class:`StreamTransport` on a child process's stdin/stdout pipes.

    Made by :func:`open_subprocess_transport`; ``process`` is the child.
    """

    __slots__ = ("process",)

    def __init__(self, process: trio.Process, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if process.stdin is None or process.stdout is None:
            raise ValueError("the process needs stdin and stdout pipes")
        super().__init__(process.stdout, process.stdin, max_message_size=max_message_size)
        self.process = process
        """The child process (a :class:`trio.Process`)."""


@asynccontextmanager
async def open_subprocess_transport(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    shutdown_timeout: float = 2.0,
    start_new_session: bool = False,
) -> AsyncIterator[SubprocessTransport]:
    """Spawn an MCP server and yield a transport on its stdin/stdout, for a client.

    ``command`` is an argument list (not a shell string); ``env`` replaces the environment if
    given (default: inherited); the child's stderr is inherited. Usage::

        async with open_subprocess_transport([sys.executable, "server.py"]) as transport:
            await transport.send(request)
            reply = await transport.receive()
        assert transport.process.returncode is not None

    Leaving the block shuts the child down as the MCP specification recommends, shielded from
    cancellation: close the child's stdin, wait up to ``shutdown_timeout`` seconds for it to
    exit, then send SIGTERM and wait as long again, then SIGKILL. The child is always reaped
    (no zombie) before the block is left; the transport is closed after the child has exited,
    so output it writes while shutting down doesn't fail. Only the child itself is signalled,
    not processes it started. ``start_new_session`` puts the child in a session of its own, so
    a terminal's Ctrl-C reaches only the parent (which may then still talk to the child).
    """
    if isinstance(command, str):
        raise TypeError("command must be a sequence of arguments, not a string")
    if not math.isfinite(shutdown_timeout) or shutdown_timeout < 0:
        raise ValueError("shutdown_timeout must be a finite number >= 0")
    process = await trio.lowlevel.open_process(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env=env,
        cwd=cwd,
        start_new_session=start_new_session,
    )
    try:
        transport = SubprocessTransport(process, max_message_size=max_message_size)
    except BaseException:  # pragma: no cover - only if open_process broke its promise of pipes
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()
        raise
    try:
        yield transport
    finally:
        with trio.CancelScope(shield=True):
            await _shut_down(transport, shutdown_timeout)


async def _shut_down(transport: SubprocessTransport, grace_period: float) -> None:
    """Close stdin, wait; SIGTERM, wait; SIGKILL, reap. Then close the transport."""
    process = transport.process
    try:
        try:
            await transport.send_eof()
        finally:
            with trio.move_on_after(grace_period):
                await process.wait()
            if process.returncode is None:
                process.terminate()
                with trio.move_on_after(grace_period):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        await transport.aclose()
