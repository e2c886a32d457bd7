"""Limits a claim can honour: SetLimit refuses every value that could make a claim (or a job's read)
fail, a row stored before the bounds is brought within them by its migration, and the bounds themselves
survive a claim after the longest idle spell a bucket can see."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import psycopg
import pytest

from api_service.usecases.admin_config import AdminConfig
from api_service.usecases.job_queries import JobQueries
from shared.domain.admin import BURST_RANGE, MAX_RUNNING_MAX, RATE_PER_SECOND_RANGE, Actor, LimitSpec
from shared.domain.errors import InvalidArgument
from shared.domain.ids import TenantId
from shared.domain.jobs import JobState
from shared.storage.database import Database, PoolSettings
from shared.storage.migrator import available_migrations, available_routine_files, migrate
from shared.storage.queue_stats import ExporterSession
from tests import factories
from tests.database_roles import ServiceLogins

pytestmark = pytest.mark.timeout(60)

OPS = Actor("admin:ops")
SLOW, FAST, WIDE = TenantId("slow"), TenantId("fast"), TenantId("wide")
# The longest idle spell a test can stand for: a key untouched for a thousand years.
IDLE = "1000 years"
BOUNDS_MIGRATION = "limits_a_claim_can_honour"


@pytest.fixture
async def api_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    url = ServiceLogins.url(database_url, service_logins.api)
    db = await Database.open(PoolSettings(url, min_size=1, max_size=4, application_name="jobs-tests"), wait=True)
    try:
        yield db
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (LimitSpec("k", rate_per_second=1e308), "rate_per_second"),
        (LimitSpec("k", rate_per_second=5e-324), "rate_per_second"),
        (LimitSpec("k", rate_per_second=RATE_PER_SECOND_RANGE[0] / 2), "rate_per_second"),
        (LimitSpec("k", rate_per_second=RATE_PER_SECOND_RANGE[1] * 1.5), "rate_per_second"),
        (LimitSpec("k", rate_per_second=math.nan), "rate_per_second"),
        (LimitSpec("k", rate_per_second=-math.inf), "rate_per_second"),
        (LimitSpec("k", max_running=1, burst=BURST_RANGE[1] + 1), "burst"),
        (LimitSpec("k", max_running=1, burst=-1), "burst"),
        (LimitSpec("k", max_running=MAX_RUNNING_MAX + 1), "max_running"),
        (LimitSpec("k", max_running=2**31 - 1), "max_running"),
    ],
)
async def test_a_limit_no_claim_can_honour_is_refused_naming_its_field(
    api_db: Database, spec: LimitSpec, field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await AdminConfig(api_db).set_limit(OPS, spec, "hostile")
    assert field in [v.field for v in refused.value.violations]
    assert await AdminConfig(api_db).list_limits() == []


def test_an_unset_field_means_its_default() -> None:
    assert LimitSpec.requested("k", max_running=2) == LimitSpec("k", 2, 0.0, 1)
    assert LimitSpec.requested("k", rate_per_second=0.5, burst=4) == LimitSpec("k", 0, 0.5, 4)


async def test_claims_and_reads_survive_every_bound_after_a_long_idle(
    api_db: Database, db: Database, sync_db, database_url: str
) -> None:
    """Each extreme the service accepts, on keys idle for a thousand years, then read by a claim, by
    GetJob's waiting reason and by the limit gauges."""
    low, high = RATE_PER_SECOND_RANGE
    config = AdminConfig(api_db)
    for key, spec in {
        f"tenant:{SLOW}": LimitSpec.requested(f"tenant:{SLOW}", rate_per_second=low),
        f"tenant:{FAST}": LimitSpec.requested(
            f"tenant:{FAST}", MAX_RUNNING_MAX, rate_per_second=high, burst=BURST_RANGE[1]
        ),
        f"tenant:{WIDE}": LimitSpec.requested(f"tenant:{WIDE}", rate_per_second=low, burst=BURST_RANGE[1]),
        "kind:echo": LimitSpec.requested("kind:echo", MAX_RUNNING_MAX, rate_per_second=high, burst=BURST_RANGE[1]),
    }.items():
        await config.set_limit(OPS, spec, "the bounds")
        sync_db.execute(
            "INSERT INTO job_key_state (key, tokens, refilled_at) VALUES (%s, 0, clock_timestamp() - %s::interval)",
            (key, IDLE),
        )
    for tenant in (SLOW, FAST, WIDE):
        await factories.insert_jobs(db, 3, tenant=tenant)

    claimed = []
    while batch := await factories.claim(db, limit=9):
        claimed += batch

    by_tenant = {t: sum(1 for c in claimed if c.tenant == t) for t in (SLOW, FAST, WIDE)}
    # The slow key's bucket of one had refilled: one start, then none for eleven days.
    assert by_tenant == {SLOW: 1, FAST: 3, WIDE: 3}
    waiting = await JobQueries(api_db).get_job(SLOW, await _pending_job(sync_db, SLOW))
    assert waiting.waiting is not None
    assert (waiting.waiting.reason, waiting.waiting.key) == ("limit_rate", f"tenant:{SLOW}")
    session = ExporterSession(database_url)
    try:
        assert await session.try_hold()
        gauges = {row.key: row for row in await session.read_limits()}
    finally:
        await session.close()
    assert gauges[f"tenant:{SLOW}"].saturated


async def _pending_job(sync_db, tenant: TenantId):
    return str(
        sync_db.rows(
            "SELECT job_id FROM jobs WHERE tenant = %s AND state = %s LIMIT 1", (tenant, JobState.PENDING.value)
        )[0]["job_id"]
    )


def test_a_stored_limit_out_of_bounds_is_brought_within_them_and_claims_go_on(empty_database_url: str) -> None:
    """A row written before the bounds existed (1e308 made every claim fail once its key idled two
    seconds) is clamped by the migration, the change recorded, and the table refuses such a row after."""
    bounds = next(m for m in available_migrations() if m.name == BOUNDS_MIGRATION)
    earlier = [m for m in available_migrations() if m.version < bounds.version]
    # Routine files as far as the migrations before the bounds can carry them (claim.sql, for one, follows
    # a later migration): the database as a service of that time left it, near enough for its limits.
    routine_files = [r for r in available_routine_files() if r.after < bounds.version]
    migrate(empty_database_url, migrations=earlier, routine_files=routine_files)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO job_limits (key, max_running, rate_per_second, burst, updated_by) VALUES"
            " ('tenant:acme', 0, 1e308, 1000, 'old'), ('provider:x', 2147483647, 5e-324, 2147483647, 'old'),"
            " ('kind:echo', 3, 2.5, 4, 'old')"
        )
        conn.execute(
            "INSERT INTO job_key_state (key, tokens, refilled_at)"
            " VALUES ('tenant:acme', 0, clock_timestamp() - interval '10 seconds')"
        )
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            conn.execute(
                "SELECT jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, clock_timestamp())"
                " FROM job_limits AS l JOIN job_key_state AS s USING (key)"
            )

    migrate(empty_database_url)

    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        limits = conn.execute(
            "SELECT key, max_running, rate_per_second, burst, updated_by FROM job_limits ORDER BY key"
        ).fetchall()
        assert limits == [
            ("kind:echo", 3, 2.5, 4, "old"),
            ("provider:x", MAX_RUNNING_MAX, RATE_PER_SECOND_RANGE[0], BURST_RANGE[1], f"migration:{BOUNDS_MIGRATION}"),
            ("tenant:acme", 0, RATE_PER_SECOND_RANGE[1], 1000, f"migration:{BOUNDS_MIGRATION}"),
        ]
        recorded = conn.execute("SELECT target, details -> 'was' ->> 'burst' FROM admin_actions ORDER BY target")
        assert recorded.fetchall() == [("provider:x", "2147483647"), ("tenant:acme", "1000")]
        tokens = conn.execute(
            "SELECT jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, clock_timestamp())"
            " FROM job_limits AS l JOIN job_key_state AS s USING (key)"
        ).fetchone()
        assert tokens == (1000.0,)
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE job_limits SET rate_per_second = 1e308 WHERE key = 'kind:echo'")
