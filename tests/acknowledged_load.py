"""Clients that submit with idempotency keys through a database outage, and the audit of what they were told.

Used by the fault tests (a crashed and restarted server, a failover): each client resubmits an
indeterminate answer with the same key until it is definite, and the audit then checks that every
acknowledged job exists exactly once, succeeded, and published one result.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import psycopg

from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceStack

INDETERMINATE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
TERMINAL = ("succeeded", "failed", "cancelled", "superseded")
OPEN_JOBS = f"SELECT count(*) FROM jobs WHERE state::text NOT IN {TERMINAL}"
CLIENT_TENANTS = ("acme", "globex")
# Each attempt's gRPC deadline.
SUBMIT_DEADLINE_SECONDS = 5.0


@dataclass(frozen=True)
class Ack:
    job_id: str
    first_sent: float  # monotonic time of the first attempt
    acknowledged_at: float


@dataclass
class Ledger:
    """What the clients were told, shared by their threads."""

    acknowledged: dict[tuple[str, str], Ack] = field(default_factory=dict)  # (tenant, key) -> ack
    retries: int = 0
    # Every indeterminate answer, each followed by a retry: (monotonic time, status code name, seconds the
    # attempt waited for it).
    indeterminate: list[tuple[float, str, float]] = field(default_factory=list)
    unexpected: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for ack in self.acknowledged.values() if ack.acknowledged_at >= since)

    def first_acknowledged(self, since: float) -> float | None:
        """When the first submission was acknowledged at or after `since`, if one was."""
        with self.lock:
            return min(
                (a.acknowledged_at for a in self.acknowledged.values() if a.acknowledged_at >= since), default=None
            )

    def indeterminate_codes(self, start: float, end: float) -> dict[str, int]:
        """The indeterminate answers given between `start` and `end`, counted by status code."""
        with self.lock:
            counts: dict[str, int] = {}
            for at, code, _ in self.indeterminate:
                if start <= at < end:
                    counts[code] = counts.get(code, 0) + 1
            return counts

    def indeterminate_waits(self, start: float, end: float) -> list[float]:
        """How long each attempt answered indeterminately between `start` and `end` waited, sorted."""
        with self.lock:
            return sorted(waited for at, _, waited in self.indeterminate if start <= at < end)


def create_service_logins(owner_url: str) -> None:
    """The API's and workers' least-privileged logins, as the deploy creates them."""
    with psycopg.connect(owner_url, autocommit=True) as admin:
        admin.execute("CREATE ROLE api_login LOGIN IN ROLE jobs_api")
        admin.execute("CREATE ROLE worker_login LOGIN IN ROLE jobs_worker")


def client_loop(
    stack: ServiceStack, index: int, keep_going: Callable[[], bool], ledger: Ledger, pause_seconds: float
) -> None:
    """Submits echo jobs (every tenth a short sleep) until `keep_going` says stop."""
    tenant = CLIENT_TENANTS[index % 2]
    client = stack.tenant(tenant)
    number = 0
    while keep_going():
        number += 1
        key = f"client{index}-{number}"
        slow = number % 10 == 0
        request = jobs_pb2.SubmitJobRequest(
            kind="sleep" if slow else "echo",
            payload=b'{"seconds": 0.3}' if slow else key.encode(),
            idempotency_key=key,
            max_attempts=50,
        )
        first_sent = time.monotonic()
        delay = 0.05
        # Once sent, a key is never abandoned: an indeterminate answer is resubmitted until it is
        # definite, even after the test asked the clients to stop.
        while True:
            sent = time.monotonic()
            try:
                response = client.stub.SubmitJob(request, metadata=client.metadata, timeout=SUBMIT_DEADLINE_SECONDS)
            except grpc.RpcError as error:
                if error.code() not in INDETERMINATE:
                    with ledger.lock:
                        ledger.unexpected.append((key, error.code().name, error.details() or ""))
                    break
                answered = time.monotonic()
                with ledger.lock:
                    ledger.retries += 1
                    ledger.indeterminate.append((answered, error.code().name, answered - sent))
                time.sleep(delay * random.uniform(0.5, 1.0))  # backoff between retries of one key
                delay = min(delay * 2, 1.0)
                continue
            with ledger.lock:
                ledger.acknowledged[(tenant, key)] = Ack(response.job.job_id, first_sent, time.monotonic())
            break
        time.sleep(pause_seconds)


def count(url: str, query: str) -> int:
    """A count, or -1 while the server does not answer (a condition polled through an outage)."""
    try:
        with psycopg.connect(url) as conn:
            row = conn.execute(query).fetchone()
            assert row is not None
            return int(row[0])
    except psycopg.OperationalError:
        return -1


@dataclass(frozen=True)
class Audit:
    """The stored jobs compared with what the clients were told."""

    rows: list[tuple[str, str, str, str]]  # tenant, idempotency key, job id, state
    lost: list[tuple[str, str]]  # acknowledged keys without exactly their one job
    not_succeeded: list[tuple[str, str]]
    unsettled: list[str]  # states of jobs not terminal
    published_twice: int  # jobs that entered `succeeded` more than once
    results: int
    succeeded: int


def audit(owner_url: str, ledger: Ledger) -> Audit:
    with psycopg.connect(owner_url) as conn:
        rows = conn.execute("SELECT tenant, idempotency_key, job_id::text, state::text FROM jobs").fetchall()
        published_twice = conn.execute(
            "SELECT count(*) FROM (SELECT job_id FROM job_events WHERE to_state = 'succeeded'"
            " GROUP BY job_id HAVING count(*) > 1) AS twice"
        ).fetchone()[0]
        results = conn.execute("SELECT count(*) FROM job_results").fetchone()[0]
    stored: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for tenant, key, job_id, state in rows:
        stored.setdefault((tenant, key), []).append((job_id, state))
    acknowledged = dict(ledger.acknowledged)
    lost = [k for k, ack in acknowledged.items() if [j for j, _ in stored.get(k, [])] != [ack.job_id]]
    return Audit(
        rows=rows,
        lost=lost,
        not_succeeded=[k for k in acknowledged if k not in lost and stored[k][0][1] != "succeeded"],
        unsettled=[state for versions in stored.values() for _, state in versions if state not in TERMINAL],
        published_twice=published_twice,
        results=results,
        succeeded=sum(1 for versions in stored.values() for _, state in versions if state == "succeeded"),
    )
