"""The service behind PgBouncer in transaction pooling mode: the real API and worker processes send their
transactions through a PgBouncer of the test's own, where consecutive transactions of one client run on
different server sessions. Submit, run, complete, cancel and watch must work as they do directly; what
needs a session (LISTEN, the gauge exporter's lock) must not go through the pooler."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from google.protobuf import timestamp_pb2

from api_service.settings import ApiSettings
from jobs.v1 import jobs_pb2
from shared.env_settings import SettingsError
from shared.storage import queries
from shared.storage.database_settings import DatabaseSettings, Pooling
from shared.storage.queue_stats import METRICS_EXPORTER_LOCK_KEY
from tests.database_roles import ServiceLogins
from tests.private_pgbouncer import PrivatePgBouncer
from tests.process_fixtures import ServiceStack, TenantClient, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

S = jobs_pb2.JobState
# More jobs than pooled server sessions by far, and every statement run many more times than psycopg's
# prepare threshold on each client connection: a statement prepared in one server session and executed
# in another fails, so prepared statements left on would show here.
JOBS_PER_TENANT = 150
SESSION_APPLICATIONS = {"jobs-listener", "jobs-api-metrics"}


@pytest.fixture
def pgbouncer(database_url: str, service_logins: ServiceLogins) -> Iterator[PrivatePgBouncer]:
    upstream = urlsplit(database_url)
    admin = upstream.username or "postgres"
    bouncer = PrivatePgBouncer(
        free_port(),
        upstream.hostname or "127.0.0.1",
        upstream.port or 5432,
        [admin, service_logins.api, service_logins.worker],
    )
    try:
        yield bouncer
    finally:
        print(f"\n----- pgbouncer log (tail) -----\n{bouncer.log_tail(1500)}")
        bouncer.stop()


def _database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _pooled_env(bouncer: PrivatePgBouncer, database_url: str, role: str, *, direct: bool) -> dict[str, str]:
    env = {
        "DATABASE_URL": bouncer.url(role, _database(database_url)),
        "JOBS_DB_POOLING": "transaction",
    }
    if direct:
        env["DATABASE_DIRECT_URL"] = ServiceLogins.url(database_url, role)
    return env


def _start_through(
    bouncer: PrivatePgBouncer,
    stack: ServiceStack,
    logins: ServiceLogins,
    database_url: str,
    *,
    direct: bool,
    **api_env: str,
) -> None:
    """The API and two workers connected through the pooler, with or without direct session URLs."""
    stack.start_api(**_pooled_env(bouncer, database_url, logins.api, direct=direct), **api_env)
    worker_env = _pooled_env(bouncer, database_url, logins.worker, direct=direct)
    for name in ("w1", "w2"):
        stack.start_worker(name, **worker_env, JOBS_WORKER_CONCURRENCY="8")


def _wait_state(client: TenantClient, job_id: str, state: int, timeout: float = 60) -> None:
    wait_until(lambda: client.get(job_id).state == state, timeout=timeout, interval=0.1, what=f"{S.Name(state)}")


def _run_the_core(stack: ServiceStack) -> None:
    """Submit (one by one and in batches), run and complete; cancel waiting and running jobs; watch."""
    submitted: dict[str, tuple[TenantClient, bytes]] = {}
    for tenant in ("acme", "globex"):
        client = stack.tenant(tenant)
        for batch in range(3):
            payloads = [f"{tenant}-{batch}-{i}".encode() for i in range(JOBS_PER_TENANT // 6)]
            response = client.submit_many([jobs_pb2.SubmitJobRequest(kind="echo", payload=p) for p in payloads])
            for result, payload in zip(response.results, payloads, strict=True):
                submitted[result.job.job_id] = (client, payload)
        for i in range(JOBS_PER_TENANT - 3 * (JOBS_PER_TENANT // 6)):
            payload = f"{tenant}-single-{i}".encode()
            submitted[client.submit("echo", payload, idempotency_key=f"single-{i}").job.job_id] = (client, payload)
    assert len(submitted) == 2 * JOBS_PER_TENANT

    def all_succeeded() -> bool:
        with psycopg.connect(stack.database_url) as conn:
            done = conn.execute("SELECT count(*) FROM jobs WHERE state = 'succeeded'").fetchone()[0]
        return done == len(submitted)

    wait_until(all_succeeded, timeout=120, interval=0.2, what="every echo job to succeed")
    for job_id, (client, payload) in submitted.items():
        stored = client.result(job_id)
        assert (stored.payload, stored.attempt, stored.fencing_token) == (payload, 1, 1)

    client = stack.tenant("acme")
    later = timestamp_pb2.Timestamp()
    later.FromSeconds(int(time.time()) + 3600)
    waiting = client.submit("echo", run_after=later).job.job_id
    cancelled = client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=waiting), metadata=client.metadata, timeout=10)
    assert cancelled.state == S.JOB_STATE_CANCELLED

    running = client.submit("sleep", json.dumps({"seconds": 60}).encode()).job.job_id
    _wait_state(client, running, S.JOB_STATE_RUNNING)
    asked = client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=running), metadata=client.metadata, timeout=10)
    assert asked.cancel_requested
    _wait_state(client, running, S.JOB_STATE_CANCELLED, timeout=30)

    watched = client.submit("sleep", json.dumps({"seconds": 0.5}).encode()).job.job_id
    stream = client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=watched), metadata=client.metadata, timeout=60)
    states = [S.Name(m.state).removeprefix("JOB_STATE_") for m in stream]
    assert states[-1] == "SUCCEEDED" and "RUNNING" in states, states
    with psycopg.connect(stack.database_url) as conn:
        published_twice = conn.execute(
            "SELECT count(*) FROM (SELECT job_id FROM job_events WHERE to_state = 'succeeded'"
            " GROUP BY job_id HAVING count(*) > 1) AS twice"
        ).fetchone()[0]
    assert published_twice == 0


def _pooler_clients(bouncer: PrivatePgBouncer, admin: str, database: str) -> set[str]:
    return {row["application_name"] for row in bouncer.show(admin, "CLIENTS") if row["database"] == database}


def _direct_sessions(database_url: str) -> list[tuple[str, str]]:
    """(application name, last statement) of the sessions on the server that did not come through the
    pooler: PgBouncer's server sessions are the ones whose application_name it set per client."""
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT application_name, query FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = ANY(%s)",
            (sorted(SESSION_APPLICATIONS),),
        ).fetchall()


def test_the_core_runs_through_pgbouncer_and_sessions_connect_directly(
    pgbouncer: PrivatePgBouncer, service_stack: ServiceStack, service_logins: ServiceLogins, database_url: str
) -> None:
    _start_through(
        pgbouncer, service_stack, service_logins, database_url, direct=True, JOBS_METRICS_REFRESH_SECONDS="0.5"
    )
    _run_the_core(service_stack)

    admin = urlsplit(database_url).username or "postgres"
    database = _database(database_url)
    through_pooler = _pooler_clients(pgbouncer, admin, database)
    assert {"jobs-api", "jobs-worker"} <= through_pooler
    assert not through_pooler & SESSION_APPLICATIONS
    transactions = sum(row["total_xact_count"] for row in pgbouncer.show(admin, "STATS") if row["database"] == database)
    assert transactions > 2 * JOBS_PER_TENANT
    # One listener per process, each LISTENing on the server directly (and asking it, now and then, whether it
    # still answers); the exporter holds its lock there.
    wait_until(
        lambda: (
            [
                q.split()[0] == "LISTEN" or q == queries.SESSION_PING
                for app, q in _direct_sessions(database_url)
                if app == "jobs-listener"
            ]
            == [True] * 3
        ),
        timeout=20,
        what="three direct LISTEN sessions",
    )
    with psycopg.connect(database_url) as conn:
        holder = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.objid = %s AND l.granted AND a.datname = current_database()",
            (METRICS_EXPORTER_LOCK_KEY,),
        ).fetchall()
    assert holder == [("jobs-api-metrics",)]


def test_without_a_direct_url_workers_and_watch_poll_through_the_pooler(
    pgbouncer: PrivatePgBouncer, service_stack: ServiceStack, service_logins: ServiceLogins, database_url: str
) -> None:
    # No gauges: the exporter lock needs a session (the settings refuse metrics without one, below).
    _start_through(pgbouncer, service_stack, service_logins, database_url, direct=False, JOBS_METRICS_LISTEN="")
    _run_the_core(service_stack)

    assert _direct_sessions(database_url) == []
    admin = urlsplit(database_url).username or "postgres"
    assert not _pooler_clients(pgbouncer, admin, _database(database_url)) & SESSION_APPLICATIONS


def test_transaction_pooling_turns_prepared_statements_off_and_needs_a_session_for_the_gauges(
    tmp_path: Path,
) -> None:
    pooled = {"DATABASE_URL": "postgresql://app@pooler:6432/jobs", "JOBS_DB_POOLING": "transaction"}
    alone = DatabaseSettings.from_env(pooled)
    assert (alone.pooling, alone.session_url, alone.prepare_threshold) == (Pooling.TRANSACTION, None, None)
    direct = DatabaseSettings.from_env({**pooled, "DATABASE_DIRECT_URL": "postgresql://app@db:5432/jobs"})
    assert direct.session_url == "postgresql://app@db:5432/jobs" and direct.prepare_threshold is None
    plain = DatabaseSettings.from_env({"DATABASE_URL": "postgresql://app@db:5432/jobs"})
    assert (plain.pooling, plain.session_url, plain.prepare_threshold) == (
        Pooling.SESSION,
        "postgresql://app@db:5432/jobs",
        5,
    )
    with pytest.raises(SettingsError, match="JOBS_DB_POOLING"):
        DatabaseSettings.from_env({**pooled, "JOBS_DB_POOLING": "statement"})

    tokens = tmp_path / "tokens.toml"
    tokens.write_text("")
    api_env = {**pooled, "JOBS_TOKENS_FILE": str(tokens), "JOBS_METRICS_LISTEN": "127.0.0.1:9100"}
    with pytest.raises(SettingsError, match="DATABASE_DIRECT_URL"):
        ApiSettings.from_env(api_env)
    assert ApiSettings.from_env({**api_env, "JOBS_METRICS_LISTEN": ""}).database.session_url is None
