"""A COMMIT whose reply is lost: the API cannot know the outcome, so it answers UNAVAILABLE
(indeterminate), and resubmitting with the same idempotency key returns the job that was committed."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import grpc
import psycopg
import pytest

from tests.pg_proxy import LostCommitProxy
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def proxy(database_url: str) -> Iterator[LostCommitProxy]:
    parts = urlsplit(database_url)
    lossy = LostCommitProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield lossy
    finally:
        lossy.close()


def _through(database_url: str, proxy: LostCommitProxy) -> str:
    parts = urlsplit(database_url)
    user = parts.netloc.rpartition("@")[0]
    # The proxy reads the protocol, so no TLS between the API and it.
    return parts._replace(netloc=f"{user}@127.0.0.1:{proxy.port}", query="sslmode=disable&gssencmode=disable").geturl()


def _rows_with_key(database_url: str, key: str) -> list[tuple]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT job_id::text, tenant FROM jobs WHERE idempotency_key = %s", (key,)).fetchall()


def test_a_lost_commit_reply_is_unavailable_and_the_resubmission_returns_the_committed_job(
    service_stack: ServiceStack, proxy: LostCommitProxy
) -> None:
    direct_url = service_stack.database_url
    service_stack.database_url = _through(direct_url, proxy)
    service_stack.start_api()
    client = service_stack.tenant("acme")
    assert client.submit("echo", b"warm-up").created

    proxy.arm()
    with pytest.raises(grpc.RpcError) as raised:
        client.submit("echo", b"lost reply", idempotency_key="order-17")
    assert proxy.dropped.is_set(), "the proxy never saw the COMMIT"
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE, raised.value.details()
    committed = _rows_with_key(direct_url, "order-17")
    assert len(committed) == 1, "the COMMIT happened although its reply was lost"

    again = wait_until(lambda: _resubmit(client), timeout=20, what="a resubmission to be answered")
    assert (again.job.job_id, again.created) == (committed[0][0], False)
    assert _rows_with_key(direct_url, "order-17") == committed


def _resubmit(client):
    try:
        return client.submit("echo", b"lost reply", idempotency_key="order-17")
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return None
